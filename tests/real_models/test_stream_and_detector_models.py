"""The stateful speech model (Silero VAD, run chunk by chunk) and the YOLOv8 layout detector on their real inputs.

The detector is also one of ``MODELS``, so every command runs on it in ``test_real_models``; here its
pages and boxes are checked more closely. Silero VAD is a ``STREAM_MODELS`` entry: its real inputs are
spoken sentences between silences, heard with the state fed back, and the original must hear which
steps are speech. Both skip when not fetched (``python -m tools.real_models fetch``); the speech also
when eSpeak NG is not installed (CI installs it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tools.real_models import cache, detection, speech
from tools.real_models.agreement import first_output, first_outputs, step_feeds, stream_outputs
from tools.real_models.catalogue import FETCHED, MODELS, STREAM_MODELS, StatePair
from tools.real_models.samples import Samples, Streams


def fetched(name: str) -> Path:
    model = FETCHED[name]
    if not cache.is_cached(model):
        pytest.skip(f"{name} not fetched into {cache.cache_dir()}: run `python -m tools.real_models fetch`")
    return cache.model_path(model)


@pytest.fixture(scope="module")
def vad() -> tuple[Path, Streams, np.ndarray]:
    """Silero VAD's file, its speech streams and the original's probability at every step."""
    path = fetched("silero_vad")
    model = STREAM_MODELS["silero_vad"]
    try:
        streams = model.make_streams(path)
    except speech.SynthesizerMissing as missing:
        pytest.skip(str(missing))
    return path, streams, stream_outputs(model, path, streams)


@pytest.fixture(scope="module")
def pages() -> tuple[Path, Samples, np.ndarray]:
    """The layout detector's file, four rendered pages and the original's output on each (one run each)."""
    path = fetched("doclaynet_yolo")
    samples = detection.layout_pages(path, count=4)
    return path, samples, first_outputs(path, MODELS["doclaynet_yolo"].input_name, samples.batch)


# ------------------------------------------------------------------------------------------- Silero VAD


def test_silero_hears_speech_and_silence_step_by_step(vad: tuple[Path, Streams, np.ndarray]) -> None:
    path, streams, probabilities = vad
    model = STREAM_MODELS["silero_vad"]
    assert streams.steps.dtype == np.float32 and streams.steps.shape[2] == speech.CONTEXT + speech.CHUNK
    assert probabilities.shape == (streams.count, streams.length, 1)
    truth = np.stack([np.asarray(t) for t in streams.truth])
    assert truth.any(axis=1).all() and (~truth).any(axis=1).all(), "each stream has speech and silence"
    assert all(model.reads(path, probabilities, streams.truth)), speech.agreement_with_truth(
        probabilities, streams.truth
    )
    assert speech.agreement_with_truth(probabilities, streams.truth) >= 0.95
    assert probabilities[..., 0][truth].mean() > 0.9 and probabilities[..., 0][~truth].mean() < 0.1
    assert model.agreement(path, probabilities, probabilities) == 1.0


def test_silero_needs_its_state_fed_back(vad: tuple[Path, Streams, np.ndarray]) -> None:
    """Run with the state reset to zeros at every step, the detector hears less: the stream matters."""
    path, streams, probabilities = vad
    model = STREAM_MODELS["silero_vad"]
    forgetful = np.stack(
        [first_output(path, step_feeds(model, streams, step)) for step in range(streams.length)], axis=1
    )
    assert model.agreement(path, probabilities, forgetful) < 0.95


def test_stream_inputs_carry_the_previous_chunk_in_front() -> None:
    audio = np.arange(3 * speech.CHUNK, dtype=np.float32)[None]
    steps = speech.step_inputs(audio)
    assert steps.shape == (1, 3, speech.CONTEXT + speech.CHUNK)
    assert not steps[0, 0, : speech.CONTEXT].any()
    assert (steps[0, 1, : speech.CONTEXT] == audio[0, speech.CHUNK - speech.CONTEXT : speech.CHUNK]).all()
    assert (steps[0, 2, speech.CONTEXT :] == audio[0, 2 * speech.CHUNK :]).all()


def test_a_state_starts_at_zeros_sized_to_the_streams() -> None:
    assert StatePair("state", "stateN", (2, -1, 128)).initial(4).shape == (2, 4, 128)
    feeds = step_feeds(STREAM_MODELS["silero_vad"], Streams(np.zeros((3, 5, 576), np.float32), (0, 1, 2)))
    assert feeds["input"].shape == (3, 576) and feeds["state"].shape == (2, 3, 128)
    assert feeds["sr"].dtype == np.int64 and int(feeds["sr"]) == speech.SAMPLE_RATE


# ------------------------------------------------------------------------------------- layout detector


def test_the_layout_detector_finds_the_drawn_regions(pages: tuple[Path, Samples, np.ndarray]) -> None:
    path, samples, output = pages
    size, names = detection.model_facts(path)
    assert (size, len(names)) == (1024, 11) and output.shape == (4, 4 + 11, 21504)
    assert samples.batch.shape == (4, 3, size, size) and 0.0 <= samples.batch.min() <= samples.batch.max() <= 1.0
    assert all(MODELS["doclaynet_yolo"].reads(path, output, samples.truth))
    found = detection.detections(output, names)
    drawn = sum(len(t) for t in samples.truth)
    hits = sum(detection.matched(f, t) for f, t in zip(found, samples.truth, strict=True))
    assert hits >= 0.85 * drawn and sum(map(len, found)) <= drawn + 2
    for kind in ("Picture", "Table", "Text", "Section-header", "Page-header"):
        regions = [r for t in samples.truth for r in t if r.label == kind]
        assert regions and sum(detection.matched(f, regions) for f in found) == len(regions), kind


def test_a_blank_page_has_no_regions(pages: tuple[Path, Samples, np.ndarray]) -> None:
    path, _, _ = pages
    blank, _ = detection.letterbox(Image.new("RGB", detection.PAGE_SIZE, (255, 255, 255)), 1024)
    _, names = detection.model_facts(path)
    assert detection.detections(first_output(path, {"images": blank[None]}), names) == [[]]


def test_same_detections_counts_lost_and_moved_boxes(pages: tuple[Path, Samples, np.ndarray]) -> None:
    path, _, output = pages
    assert detection.same_detections(path, output, output) == 1.0
    moved = output.copy()
    moved[:, 0] += 400.0  # every box slides 400 input pixels right: none overlaps its old place enough
    assert detection.same_detections(path, output, moved) < 0.2


def test_f1_and_matching_without_a_model() -> None:
    a = detection.Region("Text", (0.0, 0.0, 10.0, 10.0))
    b = detection.Region("Text", (1.0, 0.0, 11.0, 10.0))  # IoU 9/11
    c = detection.Region("Table", (1.0, 0.0, 11.0, 10.0))
    assert detection.matched([b], [a]) == 1 and detection.matched([c], [a]) == 0
    assert detection.f1([b, c], [a]) == pytest.approx(2 / 3)
    assert detection.f1([], []) == 1.0 and detection.f1([a], []) == 0.0
