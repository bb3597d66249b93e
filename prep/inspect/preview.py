"""prep preview: a contact sheet of packed samples, to see a wrong rotation, a bad crop or a
misaligned mask at a glance. Numpy and Pillow only: samples are read from the shards' memory maps.

Sheet layout: a header line, then tiles in row-major order, each `tile` px square (the stored
pixels, not rescaled) with a caption strip under it ("index class"), GAP px between tiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from loaders.fields import FIELDS
from loaders.format import Manifest, array_name, open_array, read_manifest
from prep import PrepError

GAP = 4
MASK_ALPHA = 0.45  # mask colour weight where the class id is not 0
SHEET_BG = (24, 24, 24)
TEXT = (235, 235, 235)
# Class id k > 0 is drawn in PALETTE[(k - 1) % len(PALETTE)]; id 0 (background) is left as is.
PALETTE = np.array(
    [
        (230, 25, 75),
        (60, 180, 75),
        (255, 225, 25),
        (0, 130, 200),
        (245, 130, 48),
        (145, 30, 180),
        (70, 240, 240),
        (240, 50, 230),
    ],
    dtype=np.float32,
)


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

    def line(self) -> str:
        w, h = self.layout.size
        overlay = ", masks overlaid" if self.masks else ""
        return (
            f"{self.output}: {self.tiles} samples at {self.size} px, "
            f"{self.layout.columns}x{self.layout.rows} tiles, {w}x{h} px{overlay}"
        )


def overlay(image: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """(H, W, 3) uint8 RGB of an (H, W, C) uint8 sample (C = 1 or 3), with class ids > 0 of an
    (H, W) mask blended in their PALETTE colour at MASK_ALPHA."""
    rgb = np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image
    if mask is None or not mask.any():
        return np.ascontiguousarray(rgb)
    colour = PALETTE[(mask.astype(np.int64) - 1) % len(PALETTE)]
    blend = (1 - MASK_ALPHA) * rgb.astype(np.float32) + MASK_ALPHA * colour
    out = np.where((mask > 0)[..., None], np.rint(blend), rgb)
    return out.astype(np.uint8)


def contact_sheet(
    tiles: Sequence[np.ndarray], captions: Sequence[str], title: str, columns: int | None = None
) -> tuple[Image.Image, SheetLayout]:
    """Tiles (each (S, S, 3) uint8) on one sheet, captioned, in row-major order."""
    if not tiles:
        raise ValueError("no tiles")
    font = ImageFont.load_default()
    _, top, _, bottom = font.getbbox("0123456789 Agjy")
    text_h = int(bottom - top)
    cols = columns or math.ceil(math.sqrt(len(tiles)))
    layout = SheetLayout(
        tile=tiles[0].shape[0],
        columns=cols,
        rows=math.ceil(len(tiles) / cols),
        header=text_h + 2 * GAP,
        caption=text_h + GAP,
    )
    sheet = Image.new("RGB", layout.size, SHEET_BG)
    draw = ImageDraw.Draw(sheet)
    draw.text((GAP, GAP), title, fill=TEXT, font=font)
    for i, (tile, caption) in enumerate(zip(tiles, captions, strict=True)):
        x, y = layout.origin(i)
        sheet.paste(Image.fromarray(tile, "RGB"), (x, y))
        draw.text((x, y + layout.tile + 1), caption, fill=TEXT, font=font)
    return sheet, layout


def _array(field: str, size: int) -> str:
    """The array of `field` at `size`: image_64 for a sized field, label for a size-free one."""
    return array_name(field, size if FIELDS[field].sized else None)


def _first(root: Path, m: Manifest, name: str, count: int) -> np.ndarray:
    """The first `count` samples of array `name`, concatenated across shards."""
    spec = m.arrays[name]
    if spec.ragged and spec.size is not None:  # jpeg or --mode keep: decoded, centre-cropped
        from loaders import CenterCrop, ImageShardDataset

        crop = CenterCrop(spec.size, ratio=1.0)
        ds = ImageShardDataset(root, spec.size, (spec.field,), crop=crop, threads=1)
        out = ds.__getitems__(list(range(count))).tensors[0]
        return (out.permute(0, 2, 3, 1) if out.ndim == 4 else out).numpy()
    parts, left = [], count
    for shard in m.shards:
        if left <= 0:
            break
        arr = open_array(root, shard.arrays[name], m.arrays[name], name)
        parts.append(np.asarray(arr[:left]))
        left -= len(parts[-1])
    return np.concatenate(parts)


def preview(
    root: Path,
    size: int | None = None,
    count: int = 64,
    output: Path = Path("sheet.png"),
    columns: int | None = None,
    masks: bool = True,
) -> PreviewResult:
    """Write a contact sheet of the first `count` samples at `size` px (default: the smallest
    stored size) to `output` (any format Pillow writes, by extension). A volume dataset
    shows the middle slices of its volumes (prep.kinds.volumes.preview)."""
    if read_manifest(root).kind == "volumes":
        from prep.kinds.volumes.preview import preview_volumes

        return preview_volumes(root, count, output, columns, masks)
    m, size = image_dataset(root, size, "preview shows")
    if count < 1 or (columns is not None and columns < 1):
        raise PrepError("--count and --columns must be at least 1")
    count = min(count, m.num_samples)
    if count == 0:
        raise PrepError(f"{root} holds no samples")
    images = _first(root, m, _array("image", size), count)
    mask_name, label_name = _array("mask", size), _array("label", size)
    has_masks = masks and mask_name in m.arrays
    mask_arr = _first(root, m, mask_name, count) if has_masks else None
    labels = _first(root, m, label_name, count) if label_name in m.arrays else None
    captions = []
    for i in range(count):
        if labels is None:
            captions.append(str(i))
        elif m.classes:
            captions.append(f"{i} {m.classes[int(labels[i])]}")
        else:
            captions.append(f"{i} label {int(labels[i])}")
    tiles = [overlay(images[i], None if mask_arr is None else mask_arr[i]) for i in range(count)]
    title = f"{root.name}: samples 0-{count - 1} of {m.num_samples} at {size} px"
    sheet, layout = contact_sheet(tiles, captions, title, columns)
    save_image(sheet.save, output)
    return PreviewResult(output, count, size, has_masks, layout)


def image_dataset(root: Path, size: int | None, what: str) -> tuple[Manifest, int]:
    """The manifest of an image dataset and the stored size to use (default: the smallest)."""
    m = read_manifest(root)
    if m.kind != "images":
        raise PrepError(f"{root} holds {m.kind}; {what} image datasets")
    sizes = m.sizes()
    size = min(sizes) if size is None else size
    if size not in sizes:
        raise PrepError(f"{root} has no size {size}. HINT: --size one of {sizes}")
    return m, size


def save_image(save: Callable[[Path], object], path: Path) -> None:
    """Write a picture for the user with `save(path)` (Pillow's Image.save, matplotlib's
    Figure.savefig); a bad path or extension is one clear error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save(path)
    except (OSError, ValueError, KeyError) as e:  # both: unknown extension -> ValueError
        raise PrepError(
            f"cannot write {path} ({e}). HINT: a writable path ending in .png or .jpg"
        ) from e
