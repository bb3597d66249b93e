"""prep preview of a volume dataset: the middle slice across each of the three axes of every
volume, labels overlaid, one row per volume, to see a flipped axis, a bad crop or a shifted
label at a glance.

Each slice is scaled to its tile (nearest neighbour: a voxel is a block of pixels, so a
4x5x7 volume is not a dot), its longer side to the tile's side, centred on the square tile: the
plane's first axis runs to the right, its second upward. int16 and float16 volumes are shown
from their 0.5th to 99.5th percentile; uint8 as stored.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loaders.format import open_array, read_manifest
from prep.inspect.sheet import PreviewResult, contact_sheet, overlay, save_image
from prep.run.errors import PrepError

TILE_MIN, TILE_MAX = 128, 256  # px: a tiny volume is enlarged, a large one reduced


def _gray(vol: np.ndarray) -> np.ndarray:
    if vol.dtype == np.uint8:
        return vol
    lo, hi = np.percentile(vol, [0.5, 99.5])
    scaled = (vol.astype(np.float32) - lo) * (255 / max(float(hi - lo), 1e-6))
    return np.rint(np.clip(scaled, 0, 255)).astype(np.uint8)


def middle_slices(vol: np.ndarray) -> list[np.ndarray]:
    """The middle plane across axis 0, 1 and 2, each shown with its first axis to the right
    and its second upward (rows from the top: the second axis decreasing)."""
    planes = [np.take(vol, vol.shape[a] // 2, axis=a) for a in range(3)]
    return [np.ascontiguousarray(p.T[::-1]) for p in planes]


def tile_side(largest: int) -> int:
    """The tiles' side in px: the largest volume side, within TILE_MIN..TILE_MAX."""
    return min(max(largest, TILE_MIN), TILE_MAX)


def scaled(plane: np.ndarray, side: int) -> np.ndarray:
    """The plane by nearest neighbour, its longer side `side` (the aspect kept).

    >>> scaled(np.arange(6).reshape(2, 3), 6)
    array([[0, 0, 1, 1, 2, 2],
           [0, 0, 1, 1, 2, 2],
           [3, 3, 4, 4, 5, 5],
           [3, 3, 4, 4, 5, 5]])
    """
    h, w = plane.shape[:2]
    f = side / max(h, w)
    rows = (np.arange(max(1, round(h * f))) / f).astype(np.int64).clip(0, h - 1)
    cols = (np.arange(max(1, round(w * f))) / f).astype(np.int64).clip(0, w - 1)
    return plane[rows[:, None], cols[None, :]]


def _square(plane: np.ndarray, side: int) -> np.ndarray:
    out = np.zeros((side, side, *plane.shape[2:]), plane.dtype)
    top, left = (side - plane.shape[0]) // 2, (side - plane.shape[1]) // 2
    out[top : top + plane.shape[0], left : left + plane.shape[1]] = plane
    return out


def _volumes(root: Path, count: int, field: str) -> list[np.ndarray]:
    """The first `count` volumes of `field`'s array, read whole (preview is for small views)."""
    m = read_manifest(root)
    name = {"image": "voxels", "label": "label_voxels"}[field]
    found: list[np.ndarray] = []
    for shard in m.shards:
        flat, shapes, offsets = (
            open_array(root, shard.arrays[a], m.arrays[a], a)
            for a in (name, "volume_shape", "voxel_offsets")
        )
        for v in range(min(shard.count, count - len(found))):
            found.append(np.asarray(flat[offsets[v] : offsets[v + 1]]).reshape(shapes[v]))
    return found


def preview_volumes(
    root: Path, count: int, output: Path, columns: int | None, masks: bool
) -> PreviewResult:
    """Write the sheet of the first `count` volumes to `output`."""
    m = read_manifest(root)
    if count < 1 or (columns is not None and columns < 1):
        raise PrepError("--count and --columns must be at least 1")
    count = min(count, m.num_samples)
    if count == 0:
        raise PrepError(f"{root} holds no volumes")
    images = _volumes(root, count, "image")
    has_masks = masks and "label_voxels" in m.arrays
    labels = _volumes(root, count, "label") if has_masks else [None] * count
    side = tile_side(max(max(v.shape) for v in images))
    tiles, captions = [], []
    orient = str(m.extra.get("orient", "???"))
    for v, (img, lab) in enumerate(zip(images, labels, strict=True)):
        planes = [scaled(p, side) for p in middle_slices(_gray(img))]
        marks = [scaled(p, side) for p in middle_slices(lab)] if lab is not None else [None] * 3
        for axis, (plane, mark) in enumerate(zip(planes, marks, strict=True)):
            tiles.append(_square(overlay(plane[..., None], mark), side))
            captions.append(f"{v} {orient[axis]}")
    title = f"{root.name}: volumes 0-{count - 1} of {m.num_samples}, middle slices ({orient})"
    sheet, layout = contact_sheet(tiles, captions, title, columns or 3)
    save_image(sheet, output)
    return PreviewResult(output, count, side, has_masks, layout)
