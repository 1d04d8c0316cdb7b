"""The PaddleOCR models' real inputs and how their outputs are read, as RapidOCR reads them.

Recognizer: CTC over the model's own character list (the ``character`` metadata), with the blank
prepended at index 0 and a space appended, greedy decoding (argmax, repeats collapsed, blanks dropped).
Classifier: argmax over ``['0', '180']``. Detector: a probability map, text where it exceeds 0.3.
"""

from __future__ import annotations

import random
from collections.abc import Sequence, Set
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx

from tools.real_models import text_lines
from tools.real_models.samples import Samples

BLANK = "blank"
ORIENTATIONS = ("0", "180")
DETECTION_THRESHOLD = 0.3
"""RapidOCR's ``Det.thresh``: a pixel is text where the map exceeds it."""

WORDS = (
    "Hello", "World", "invoice", "total", "price", "ONNX", "Runtime", "model", "Paris", "Berlin", "Street",
    "Order", "Number", "Date", "Lorem", "ipsum", "dolor", "amet", "café", "Müller", "naïve", "Total", "Label",
    "Python", "version", "Magika", "Station", "Express", "North", "Coffee", "Tea", "Bank", "Account",
)  # fmt: skip
NUMBERS = ("2024", "42.50", "#7731", "$19.99", "25°C", "1.31", "07-11", "3/4", "100%", "A-12", "(88)")


# ------------------------------------------------------------------------------------------ characters


@lru_cache(maxsize=4)
def character_table(model: Path) -> tuple[str, ...]:
    """Class index to character: the blank, the model's ``character`` metadata one per line, a space."""
    metadata = {prop.key: prop.value for prop in onnx.load(str(model), load_external_data=False).metadata_props}
    if "character" not in metadata:
        raise ValueError(f"{model} has no 'character' metadata: not a PaddleOCR recognizer")
    return (BLANK, *metadata["character"].splitlines(), " ")


def ctc_greedy(probabilities: np.ndarray, table: Sequence[str]) -> list[str]:
    """Per line of a [N, T, classes] output: the argmax path, repeats collapsed, blanks (index 0) dropped."""
    texts = []
    for path in probabilities.argmax(axis=2):
        keep = np.ones(len(path), dtype=bool)
        keep[1:] = path[1:] != path[:-1]
        keep &= path != 0
        texts.append("".join(table[index] for index in path[keep]))
    return texts


def same_reading(read: str, truth: str) -> bool:
    """Whether a decoded line says ``truth``; spaces are left out (the recognizer often drops those around
    a symbol, and adds one at the end)."""
    return "".join(read.split()) == "".join(truth.split())


def phrases(alphabet: Set[str], count: int, seed: int) -> list[str]:
    """``count`` seeded phrases of two or three words and a number, each made only of ``alphabet``."""
    words = [w for w in WORDS if set(w) <= alphabet]
    numbers = [n for n in NUMBERS if set(n) <= alphabet]
    rng = random.Random(seed)
    return [
        " ".join([*rng.sample(words, rng.choice((1, 2))), rng.choice(numbers)])
        if index % 2
        else " ".join([rng.choice(numbers), *rng.sample(words, 2)])
        for index in range(count)
    ]


@lru_cache(maxsize=4)
def recognizer_alphabet(model: Path) -> frozenset[str]:
    """The characters the recognizer knows that DejaVu Sans draws (a few seconds: each is drawn once)."""
    return frozenset(text_lines.drawable(character_table(model)[1:-1]))


# -------------------------------------------------------------------------------------------- makers


def recognizer_lines(model: Path, count: int = 8, width: int = 320, seed: int = 0) -> Samples:
    """``count`` text lines 48 pixels high and ``width`` wide, each naming its text."""
    texts = phrases(recognizer_alphabet(model), count, seed)
    images = [text_lines.text_line(text, width, 48) for text in texts]
    return Samples(text_lines.normalised(images), tuple(texts))


def orientation_lines(model: Path, count: int = 8, seed: int = 1) -> Samples:
    """``count`` 48 x 192 text lines, every other one turned upside down, each naming its angle."""
    del model  # the classifier has no character list; the text is plain Latin
    alphabet = {chr(c) for c in range(33, 127)} | set("°éüï")
    images, angles = [], []
    for index, text in enumerate(phrases(text_lines.drawable(alphabet), count, seed)):
        image = text_lines.text_line(text, 192, 48)
        upside_down = index % 2 == 1
        images.append(image.rotate(180) if upside_down else image)
        angles.append(ORIENTATIONS[upside_down])
    return Samples(text_lines.normalised(images), tuple(angles))


def detector_pages(model: Path, count: int = 2, size: int = 320, seed: int = 2) -> Samples:
    """``count`` ``size`` x ``size`` pages of four text lines, each naming its lines' boxes."""
    del model
    alphabet = text_lines.drawable({chr(c) for c in range(33, 127)})
    pages = [text_lines.text_page(phrases(alphabet, 4, seed + index), size) for index in range(count)]
    return Samples(text_lines.normalised([image for image, _ in pages]), tuple(boxes for _, boxes in pages))


# --------------------------------------------------------------------------------- reading and agreeing


def reads_text(model: Path, output: np.ndarray, truth: Sequence[object]) -> list[bool]:
    decoded = ctc_greedy(output, character_table(model))
    return [same_reading(read, str(text)) for read, text in zip(decoded, truth, strict=True)]


def same_text(model: Path, reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of lines whose decoded string is unchanged."""
    table = character_table(model)
    pairs = list(zip(ctc_greedy(reference, table), ctc_greedy(candidate, table), strict=True))
    return sum(a == b for a, b in pairs) / len(pairs)


def reads_orientation(model: Path, output: np.ndarray, truth: Sequence[object]) -> list[bool]:
    del model
    return [ORIENTATIONS[index] == angle for index, angle in zip(output.argmax(axis=1), truth, strict=True)]


def text_mask(probabilities: np.ndarray) -> np.ndarray:
    return probabilities > DETECTION_THRESHOLD


def finds_lines(model: Path, output: np.ndarray, truth: Sequence[object], margin: int = 8) -> list[bool]:
    """Per page: every drawn line has at least 30% of its box marked as text, and no more than 1% of the
    page away from the lines (``margin`` pixels around each box) is."""
    del model
    found = []
    for mask, boxes in zip(text_mask(output[:, 0]), truth, strict=True):
        away = np.ones_like(mask)
        covered = []
        for left, top, right, bottom in boxes:  # type: ignore[attr-defined]
            covered.append(mask[top:bottom, left:right].mean() >= 0.3)
            away[max(0, top - margin) : bottom + margin, max(0, left - margin) : right + margin] = False
        found.append(all(covered) and mask[away].mean() <= 0.01)
    return found


def map_iou(model: Path, reference: np.ndarray, candidate: np.ndarray) -> float:
    """Intersection over union of the two text masks (1.0 when both are empty)."""
    del model
    a, b = text_mask(reference), text_mask(candidate)
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)
