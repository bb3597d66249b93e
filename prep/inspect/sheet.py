"""A contact sheet: a header line, then tiles of samples in row-major order, each `tile` px
square with a caption strip under it, GAP px between tiles; and the one place a picture for the
user is written (prep preview, prep tune --plot). Tiles are drawn on by the fields
(loaders.fields.drawing: PALETTE, re-exported here)."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from loaders.fields.drawing import PALETTE as PALETTE
from prep.run.errors import PrepError
from prep.run.files import atomic_write_bytes

GAP = 4
SHEET_BG = (24, 24, 24)
TEXT = (235, 235, 235)
TILE_MAX = 128  # px: prep report's tiles, a larger stored size shrunk to this (a small page)
BLANK_SHARE = 0.99  # a sample with more of its pixels in one colour looks blank
# Levels (0-255) a pixel may stray from that colour and still count as it: JPEG and resampling
# noise on a flat colour, a transparent PNG that packs to 253-255, are blank to the eye.
BLANK_LEVELS = 4


@dataclass(frozen=True)
class SheetLayout:
    """Where tile i lies on the sheet."""

    tile: int
    columns: int
    rows: int
    header: int  # px above the first row
    caption: int  # px under each tile

    def origin(self, i: int) -> tuple[int, int]:
        """(x, y) of the top-left pixel of tile i."""
        r, c = divmod(i, self.columns)
        return GAP + c * (self.tile + GAP), self.header + r * (self.tile + self.caption + GAP)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the sheet."""
        return (
            GAP + self.columns * (self.tile + GAP),
            self.header + self.rows * (self.tile + self.caption + GAP),
        )


@dataclass
class PreviewResult:
    output: Path
    tiles: int
    size: int
    masks: bool
    layout: SheetLayout
    blank: int = 0  # samples more than BLANK_SHARE one colour (near_one_colour_share)

    def line(self) -> str:
        w, h = self.layout.size
        overlay = ", fields drawn on them" if self.masks else ""
        blank = (
            f"; {self.blank} of {self.tiles} look blank (over {BLANK_SHARE:.0%} one colour, "
            f"within {BLANK_LEVELS} levels). "
            "HINT: transparent PNGs? repack with --background R,G,B"
            if self.blank
            else ""
        )
        return (
            f"{self.output}: {self.tiles} samples at {self.size} px, "
            f"{self.layout.columns}x{self.layout.rows} tiles, {w}x{h} px{overlay}{blank}"
        )


def one_colour_share(image: np.ndarray) -> float:
    """The share of an (H, W, C) uint8 image's pixels in its most common colour.

    >>> one_colour_share(np.zeros((4, 5, 3), np.uint8))
    1.0
    """
    flat = image.reshape(-1, image.shape[-1]).astype(np.uint32)
    if not len(flat):
        return 0.0
    keys = flat[:, 0] if flat.shape[1] == 1 else (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]
    return float(np.unique(keys, return_counts=True)[1].max() / len(keys))


def near_one_colour_share(image: np.ndarray, levels: int = BLANK_LEVELS) -> float:
    """The share of an (H, W, C) uint8 image's pixels within `levels` of its median colour in
    every channel: the share of a blank image's pixels in its colour, noise allowed.

    >>> img = np.full((4, 5, 3), 254, np.uint8)
    >>> img[0, :3], img[1, 0] = 251, 0
    >>> near_one_colour_share(img)
    0.95
    """
    flat = image.reshape(-1, image.shape[-1]).astype(np.int16)
    if not len(flat):
        return 0.0
    centre = np.median(flat, axis=0)
    return float((np.abs(flat - centre) <= levels).all(axis=1).mean())


def shrink(rgb: np.ndarray, side: int = TILE_MAX) -> tuple[np.ndarray, float]:
    """The picture with its longer side at most `side` (box filter), and the scale used."""
    h, w = rgb.shape[:2]
    k = min(1.0, side / max(h, w, 1))
    if k == 1.0:
        return rgb, k
    size = (max(1, round(w * k)), max(1, round(h * k)))
    return np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BOX)), k


def in_tile(rgb: np.ndarray, side: int) -> np.ndarray:
    """An (h, w, 3) sample centred in a (side, side, 3) tile of SHEET_BG, never enlarged; one
    larger than the tile is shrunk to fit it."""
    rgb = shrink(rgb, side)[0]
    h, w = rgb.shape[:2]
    tile = np.empty((side, side, 3), np.uint8)
    tile[:] = SHEET_BG
    top, left = (side - h) // 2, (side - w) // 2
    tile[top : top + h, left : left + w] = rgb
    return tile


def _fit_text(text: str, font: ImageFont.ImageFont | ImageFont.FreeTypeFont, width: int) -> str:
    """`text`, its start cut ("...tail") until it is at most `width` px wide: a path's file name
    is what tells samples apart."""
    if font.getlength(text) <= width:
        return text
    while len(text) > 1 and font.getlength("..." + text) > width:
        text = text[1:]
    return "..." + text


def contact_sheet(
    tiles: Sequence[np.ndarray], captions: Sequence[str], title: str, columns: int | None = None
) -> tuple[Image.Image, SheetLayout]:
    """Tiles (each (S, S, 3) uint8) on one sheet, captioned, in row-major order; a caption's
    lines ("\\n") are each cut to the tile's width."""
    if not tiles:
        raise ValueError("no tiles")
    font = ImageFont.load_default()
    _, top, _, bottom = font.getbbox("0123456789 Agjy")
    text_h = int(bottom - top)
    lines = max(c.count("\n") + 1 for c in captions)
    cols = columns or math.ceil(math.sqrt(len(tiles)))
    layout = SheetLayout(
        tile=tiles[0].shape[0],
        columns=cols,
        rows=math.ceil(len(tiles) / cols),
        header=text_h + 2 * GAP,
        caption=lines * (text_h + 1) + GAP,
    )
    sheet = Image.new("RGB", layout.size, SHEET_BG)
    draw = ImageDraw.Draw(sheet)
    draw.text((GAP, GAP), title, fill=TEXT, font=font)
    for i, (tile, caption) in enumerate(zip(tiles, captions, strict=True)):
        x, y = layout.origin(i)
        sheet.paste(Image.fromarray(tile, "RGB"), (x, y))
        for k, line in enumerate(caption.split("\n")):
            text = _fit_text(line, font, layout.tile)
            draw.text((x, y + layout.tile + 1 + k * (text_h + 1)), text, fill=TEXT, font=font)
    return sheet, layout


def save_image(picture: Image.Image | Any, path: Path) -> None:
    """Write a picture for the user, a Pillow Image or a matplotlib Figure (its savefig), in
    the format of `path`'s extension, through atomic_write_bytes: a link at `path` (in a dataset
    someone shipped) is replaced, never written through. A bad path or extension is one clear
    error."""
    ext = path.suffix.lower()
    buf = io.BytesIO()
    try:
        if not ext:
            raise ValueError("no file extension")
        if isinstance(picture, Image.Image):
            fmt = Image.registered_extensions().get(ext)
            if fmt is None:
                raise ValueError(f"unknown file extension: {ext}")
            picture.save(buf, fmt)
        else:
            picture.savefig(buf, format=ext[1:])
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buf.getvalue())
    except (OSError, ValueError, KeyError) as e:  # an unknown extension: ValueError
        raise PrepError(
            f"cannot write {path} ({e}). HINT: a writable path ending in .png or .jpg"
        ) from e
