"""prep preview: a contact sheet of a dataset's first samples (a wrong rotation, crop or mask at a
glance), or without pictures its first rows as text: a sample's pictures as stored (a video's
frames: a row of tiles), shrunk only to fit, the fields drawn on them (Field.draw) and captioned."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from loaders.fields import Json, Label, Labels, Text
from prep.inspect.stored import Stored
from prep.run.errors import PrepError
from prep.run.files import atomic_write_bytes

GAP = 4
SHEET_BG = (24, 24, 24)
TEXT = (235, 235, 235)
TILE_CAP = 256  # px: the largest tile for pictures not of a stored size (volume slices)
TILE_MAX = 128  # px: prep report's tiles, a larger stored size shrunk to this (a small page)
BLANK_SHARE = 0.99  # a sample with more of its pixels in one colour looks blank
# Levels (0-255) a pixel may stray from that colour and still count as it: JPEG and resampling
# noise on a flat colour, a transparent PNG that packs to 253-255, are blank to the eye.
BLANK_LEVELS = 4


@dataclass(frozen=True)
class SheetLayout:
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


def near_one_colour_share(image: np.ndarray, levels: int = BLANK_LEVELS) -> float:
    """The share of an (H, W, C) uint8 image's pixels within `levels` of its median colour in
    every channel: a blank image's share in its colour, noise allowed.

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
    """An (h, w, 3) picture centred in a (side, side, 3) tile of SHEET_BG, shrunk to fit."""
    rgb = shrink(rgb, side)[0]
    h, w = rgb.shape[:2]
    tile = np.full((side, side, 3), SHEET_BG, np.uint8)
    top, left = (side - h) // 2, (side - w) // 2
    tile[top : top + h, left : left + w] = rgb
    return tile


def contact_sheet(
    tiles: Sequence[np.ndarray], captions: Sequence[str], title: str, columns: int | None = None
) -> tuple[Image.Image, SheetLayout]:
    """Tiles (each (S, S, 3) uint8) on one sheet, each caption line ("\\n") cut to its width."""
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
            # cut at its start ("...tail") to the tile's width: a path's end tells samples apart
            text, cut = line, font.getlength(line) > layout.tile
            while cut and len(text) > 1 and font.getlength("..." + text) > layout.tile:
                text = text[1:]
            text = "..." + text if cut else text
            draw.text((x, y + layout.tile + 1 + k * (text_h + 1)), text, fill=TEXT, font=font)
    return sheet, layout


def save_image(picture: Image.Image | Any, path: Path) -> None:
    """Write a Pillow Image or matplotlib Figure as `path`'s extension says, atomically."""
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


def captions(st: Stored, i: int, known: dict[str, Any]) -> tuple[str, list[str]]:
    """Sample i's index and short captions (the class first), then a line a text field."""
    first, lines = str(i), []
    named = sorted(st.fields.items(), key=lambda nf: not isinstance(nf[1], Label | Labels))
    for name, f in named:
        said = f.caption(known[name] if name in known else st.value(name, i))
        if said and isinstance(f, Text | Json):
            lines.append(said)
        elif said:
            first += f" {said}"
    return first, lines


def preview(
    root: Path,
    size: int | None = None,
    count: int = 64,
    output: Path = Path("sheet.png"),
    columns: int | None = None,
    masks: bool = True,
) -> PreviewResult:
    """Write a contact sheet of the first `count` samples at `size` px to `output`."""
    if count < 1 or (columns is not None and columns < 1):
        raise PrepError("--count and --columns must be at least 1")
    st = Stored(root, size)
    picture = st.picture()
    if picture is None:  # the CLI prints rows() instead
        raise PrepError(f"{root} has no field that makes pictures (images, video, volumes)")
    count = min(count, len(st))
    if count == 0:
        raise PrepError(f"{root} holds no samples")
    drawn = st.on(picture) if masks else []
    pictures, texts, blank = [], [], 0
    for i in range(count):
        known = {n: st.value(n, i) for n in (picture, *drawn)}
        shown = st.fields[picture].pictures(known[picture])
        drawn_on = [p for p, _ in shown]
        blank += near_one_colour_share(drawn_on[0]) > BLANK_SHARE
        for name in drawn:
            drawn_on = st.fields[name].draw(drawn_on, known[name], 1.0)
        first, lines = captions(st, i, known)
        pictures.append(drawn_on)
        texts.append(["\n".join([f"{first} {what}".rstrip(), *lines]) for _, what in shown])
    side = min(max(max(p.shape[:2]) for row in pictures for p in row), max(TILE_CAP, st.size or 0))
    per = max(map(len, pictures))  # pictures a sample: one row a sample when more than one
    blank_tile = in_tile(np.zeros((0, 0, 3), np.uint8), side)
    tiles = [in_tile(p, side) for row in pictures for p in row + [blank_tile] * (per - len(row))]
    said = [t for row in texts for t in row + [""] * (per - len(row))]
    title = f"{st.root.name}: samples 0-{count - 1} of {len(st)} at {st.size or side} px"
    sheet, layout = contact_sheet(tiles, said, title, columns or (per if per > 1 else None))
    save_image(sheet, output)
    return PreviewResult(output, count, st.size or side, bool(drawn), layout, blank)


def rows(root: Path, count: int = 10) -> str:
    """The first `count` samples as text, a row each: the split, then each field's caption."""
    st = Stored(root)
    count = min(count, len(st))
    heads = ["split", *(str(getattr(f, "name", "") or n) for n, f in st.fields.items())]
    splits = st.splits()
    table = [heads] + [
        [str(splits[i]), *(f.caption(st.value(n, i)) for n, f in st.fields.items())]
        for i in range(count)
    ]
    widths = [min(20, max(len(r[j]) for r in table)) for j in range(len(heads))]
    return "\n".join(
        "  ".join(v[:20].ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in table
    )
