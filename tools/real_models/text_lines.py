"""Text drawn with Pillow in DejaVu Sans: the pictures the OCR models are fed.

DejaVu is the font Debian installs by default (``fonts-dejavu-core``), so CI draws the same pixels as a
developer's machine. It has no CJK glyphs: a character it lacks would be drawn as an empty box the
recognizer cannot read, so :func:`drawable` keeps only what the font really has.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONT_PATH = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
FONT_PACKAGE = "fonts-dejavu-core"
MISSING_GLYPH = "\ue000"
"""A private-use code point: the font draws its missing-glyph box for it."""


class FontMissing(RuntimeError):
    """DejaVu Sans is not installed; the message says which package brings it."""


@lru_cache(maxsize=64)
def font(size: int) -> ImageFont.FreeTypeFont:
    if not FONT_PATH.is_file():
        raise FontMissing(f"{FONT_PATH} is missing (Debian package {FONT_PACKAGE})")
    return ImageFont.truetype(str(FONT_PATH), size)


def drawable(characters: Iterable[str], size: int = 32) -> set[str]:
    """The single characters of ``characters`` the font draws as themselves, not as its missing-glyph box."""
    box = bytes(font(size).getmask(MISSING_GLYPH))
    return {c for c in characters if len(c) == 1 and not c.isspace() and bytes(font(size).getmask(c)) != box}


def fitting_font(draw: ImageDraw.ImageDraw, text: str, width: int, largest: int) -> ImageFont.FreeTypeFont:
    """The largest font size up to ``largest`` at which ``text`` fits in ``width`` pixels."""
    for size in range(largest, 9, -1):
        left, _, right, _ = draw.textbbox((0, 0), text, font=font(size))
        if right - left <= width:
            return font(size)
    return font(10)


def text_line(text: str, width: int, height: int, margin: int = 6) -> Image.Image:
    """``text`` in black on white, left-aligned and centred vertically, as large as fits: a cropped text line."""
    image = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    face = fitting_font(draw, text, width - 2 * margin, largest=int(height * 0.7))
    left, top, _, bottom = draw.textbbox((0, 0), text, font=face)
    draw.text((margin - left, (height - (bottom - top)) // 2 - top), text, fill=(0, 0, 0), font=face)
    return image


def text_page(lines: Sequence[str], size: int) -> tuple[Image.Image, list[tuple[int, int, int, int]]]:
    """A white ``size`` x ``size`` page with ``lines`` drawn one under another, and each line's box
    (left, top, right, bottom) in pixels."""
    image = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    boxes: list[tuple[int, int, int, int]] = []
    y = size // 16
    for index, text in enumerate(lines):
        x = size // 20 + 8 * index
        face = fitting_font(draw, text, size - x - size // 20, largest=22 + 4 * (index % 3))
        box = draw.textbbox((x, y), text, font=face)
        draw.text((x, y), text, fill=(0, 0, 0), font=face)
        boxes.append((int(box[0]), int(box[1]), int(box[2]), int(box[3])))
        y = int(box[3]) + size // 10
    return image, boxes


def normalised(images: Sequence[Image.Image]) -> np.ndarray:
    """[N,3,H,W] float32 in [-1, 1]: pixel / 255, minus 0.5, over 0.5, as PaddleOCR's models were trained."""
    batch = np.stack([np.asarray(image.convert("RGB"), dtype=np.float32).transpose(2, 0, 1) for image in images])
    return ((batch / 255.0 - 0.5) / 0.5).astype(np.float32)
