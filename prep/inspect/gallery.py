"""Samples for prep report's grids: chosen at random within each class (a fixed seed, so the
same dataset gives the same page), read as stored through the loaders' shard reader
(`loaders.read.store.ShardStore`: the checked memory maps; a JPEG's checksum before its decode),
masks overlaid and boxes drawn.

A grid reads only the samples it shows: a million-sample dataset costs its labels (one byte a
sample) and the few hundred picked samples, never a pass over the pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from loaders.format import OFFSETS, FormatError
from loaders.read.store import ShardStore
from prep.inspect.sheet import PALETTE, overlay

TILE_MAX = 128  # px: a larger stored size is shown shrunk to this (the page stays small)
GRID_BUDGET = 256  # tiles in a grid at most, whatever the class count: bounds the file's size


def locate(store: ShardStore, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shard, index in the shard) of each dataset index."""
    starts = np.cumsum([0, *(s.count for s in store.manifest.shards)])
    shard = np.searchsorted(starts, indices, side="right") - 1
    return shard.astype(np.int64), (indices - starts[shard]).astype(np.int64)


def column(store: ShardStore, name: str) -> np.ndarray:
    """Array `name` of every shard, concatenated (labels, orig_size: small per sample)."""
    return np.concatenate(
        [np.asarray(store.array(s, name)) for s in range(len(store.manifest.shards))]
    )


def pick(labels: np.ndarray | None, n: int, per_class: int, seed: int = 0) -> dict[int, np.ndarray]:
    """Up to `per_class` sorted random indices of each label (key -1: every sample, when there
    are no labels), with at most GRID_BUDGET in all: with many classes, fewer a class.

    >>> {k: v.tolist() for k, v in pick(np.array([0, 1, 0, 1, 1]), 5, 9).items()}
    {0: [0, 2], 1: [1, 3, 4]}
    """
    rng = np.random.default_rng(seed)
    if labels is None:
        return {-1: np.sort(rng.permutation(n)[: min(per_class, GRID_BUDGET)])}
    perm = rng.permutation(len(labels))
    shuffled = labels[perm]
    order = np.argsort(shuffled, kind="stable")
    values, starts = np.unique(shuffled[order], return_index=True)
    take = max(1, min(per_class, GRID_BUDGET // max(1, len(values))))
    out = {}
    for v, start in zip(values[:GRID_BUDGET].tolist(), starts[:GRID_BUDGET].tolist(), strict=False):
        group = shuffled[order[start : start + take]]
        out[int(v)] = np.sort(perm[order[start : start + take]][group == v])
    return out


@dataclass(frozen=True)
class ImageArrays:
    """The stored arrays of one image field at one size: its pixels, and where the dataset
    has them its stored (h, w) (mode keep), JPEG checksums, mask and boxes."""

    image: str
    hw: str | None
    crc: str | None
    mask: str | None = None
    boxes: str | None = None
    box_labels: str | None = None


def read(store: ShardStore, name: str, indices: np.ndarray) -> list[np.ndarray]:
    """Samples `indices` of array `name` as stored: a fixed one's rows, a ragged one's values
    (views of the store's checked maps; numpy only, no torch)."""
    spec = store.manifest.arrays[name]
    shard, local = locate(store, indices)
    out = []
    for s, k in zip(shard.tolist(), local.tolist(), strict=True):
        data = store.array(s, name)
        if spec.ragged:
            off = store.array(s, name + OFFSETS)
            out.append(data[int(off[k]) : int(off[k + 1])])
        else:
            out.append(data[k])
    return out


def images(
    store: ShardStore, arrays: ImageArrays, indices: np.ndarray, size: int
) -> list[np.ndarray]:
    """(H, W, C) uint8 samples at their stored (h, w); a JPEG one decoded after its checksum
    (FormatError naming the shard and sample when it differs)."""
    from loaders.read.decode import Places, check_crc, decode_jpeg

    spec = store.manifest.arrays[arrays.image]
    srcs = read(store, arrays.image, indices)
    hw = read(store, arrays.hw, indices) if arrays.hw else [np.array([size, size])] * len(srcs)
    crc: list[np.ndarray | None] = [None] * len(srcs)
    if arrays.crc:
        crc = list(read(store, arrays.crc, indices))
    shard, local = locate(store, indices)
    files = {s: store.manifest.shards[s].arrays[arrays.image].file for s in set(shard.tolist())}
    places = Places(files, shard, local, store.source)
    out = []
    for j, src in enumerate(srcs):
        sides = (int(hw[j][0]), int(hw[j][1]))
        if not spec.ragged:
            out.append(np.asarray(src))
        elif spec.codec == "jpeg":
            stored = crc[j]
            check_crc(src, None if stored is None else int(stored), places, j)
            try:
                out.append(decode_jpeg(src, sides, 1, spec.shape[-1]).copy())
            except (ValueError, OSError) as e:
                raise FormatError(f"{places[j]}: the JPEG cannot be decoded ({e})") from e
        else:
            out.append(np.asarray(src).reshape(*sides, *spec.shape[2:]))
    return [o if o.ndim == 3 else o[..., None] for o in out]


def masks(
    store: ShardStore, arrays: ImageArrays, indices: np.ndarray, size: int
) -> list[np.ndarray]:
    """(H, W) uint8 class-id masks, at their images' stored (h, w)."""
    assert arrays.mask is not None
    mask_only = ImageArrays(arrays.mask, arrays.hw, None)
    return [m[..., 0] for m in images(store, mask_only, indices, size)]


def shrink(rgb: np.ndarray, side: int = TILE_MAX) -> tuple[np.ndarray, float]:
    """The picture with its longer side at most `side` (box filter), and the scale used."""
    h, w = rgb.shape[:2]
    k = min(1.0, side / max(h, w))
    if k == 1.0:
        return rgb, k
    size = (max(1, round(w * k)), max(1, round(h * k)))
    return np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BOX)), k


def boxed(
    rgb: np.ndarray, boxes: np.ndarray, labels: np.ndarray | None, scale: float
) -> np.ndarray:
    """The picture with (x0, y0, x1, y1) boxes (stored pixels, times `scale`) outlined, each
    in its label's PALETTE colour (its label's id written at its corner)."""
    img = Image.fromarray(rgb)
    draw = ImageDraw.Draw(img)
    for b, box in enumerate(np.asarray(boxes, dtype=np.float64).reshape(-1, 4)):
        label = None if labels is None or b >= len(labels) else int(labels[b])
        colour = tuple(int(c) for c in PALETTE[(label or 0) % len(PALETTE)])
        x0, y0, x1, y1 = (box * scale).tolist()
        draw.rectangle((x0, y0, max(x0, x1), max(y0, y1)), outline=colour, width=2)
        if label is not None:
            draw.text((x0 + 2, y0 + 1), str(label), fill=colour)
    return np.asarray(img)


def tile(image: np.ndarray, mask: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """A sample ready for the page: RGB, its mask blended in, at most TILE_MAX px a side."""
    return shrink(overlay(image, mask))
