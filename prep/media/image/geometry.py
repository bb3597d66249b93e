"""Where a decoded image goes (the geometry of each size and mode: resize to `content`, then crop
or pad), every size made from one decode, how a sample is stored, and the per-channel mean and
std of the stored pixels (`extra.stats`: docs/format.md). Arrays in, arrays out.

>>> sums = PixelSums()
>>> sums.add({2: np.array([[[0], [2]]], dtype=np.uint8)})
>>> combine([{"stats": sums.record(), "shard": {}}])["sizes"]["2"]
{'mean': [1.0], 'std': [1.0], 'pixels': 2}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from loaders.format import ArraySpec
from prep.run.profile import timed

MODES = ("fill", "fit", "stretch", "keep")


@dataclass(frozen=True)
class Geometry:
    """How a (h, w) source becomes a size x size sample: resize to `content`, then crop or pad."""

    content: tuple[int, int]  # (h, w) after resizing, before crop/pad
    size: int
    mode: str

    @property
    def origin(self) -> tuple[int, int]:
        """(top, left) of the content in the sample: < 0 where fill crops, > 0 where fit pads."""
        (h, w), s = self.content, self.size
        if self.mode == "fill":
            return -((h - s) // 2), -((w - s) // 2)
        if self.mode == "fit":
            return (s - h) // 2, (s - w) // 2
        return 0, 0

    @property
    def shape(self) -> tuple[int, int]:
        """The stored sample's (h, w): size x size, or keep's content."""
        return self.content if self.mode == "keep" else (self.size, self.size)


def geometry(h: int, w: int, size: int, mode: str) -> Geometry:
    """fill: shorter side to size, centre crop; fit: longer side to size, pad; stretch: squash;
    keep: longer side to at most size (never enlarged), no crop, no pad.

    >>> geometry(3024, 4032, 256, "fill").content, geometry(3024, 4032, 256, "fit").content
    ((256, 341), (192, 256))
    >>> geometry(3024, 4032, 256, "keep").content, geometry(100, 50, 256, "keep").content
    ((192, 256), (100, 50))
    """
    if mode == "stretch":
        return Geometry((size, size), size, mode)
    scale = size / (min(h, w) if mode == "fill" else max(h, w))
    if mode == "keep":
        scale = min(scale, 1.0)
    ch, cw = max(1, round(h * scale)), max(1, round(w * scale))
    bound = max if mode == "fill" else min  # fill covers the square; fit and keep lie within it
    ch, cw = bound(ch, size), bound(cw, size)
    return Geometry((ch, cw), size, mode)


def resize(img: np.ndarray, hw: tuple[int, int], nearest: bool = False) -> np.ndarray:
    """Shrink without aliasing, cheaply: bilinear under ~2x (it still reads every pixel), area
    beyond (0.9 levels from INTER_AREA, at 1/5 its cost); bilinear to enlarge; nearest: masks."""
    h, w = hw
    if img.shape[:2] == (h, w):
        return img
    if nearest:
        interp = cv2.INTER_NEAREST_EXACT
    elif img.shape[0] > 2.1 * h or img.shape[1] > 2.1 * w:
        interp = cv2.INTER_AREA
    else:
        interp = cv2.INTER_LINEAR
    return cv2.resize(img, (w, h), interpolation=interp)


def place(content: np.ndarray, g: Geometry, pad_value: int) -> np.ndarray:
    """Centre-crop (fill) or centre-pad (fit) `content` to g.size x g.size; keep: as it is."""
    h, w = content.shape[:2]
    s = g.size
    if (h, w) == (s, s) or g.mode == "keep":
        return np.ascontiguousarray(content)
    top, left = g.origin
    if g.mode == "fill":
        return np.ascontiguousarray(content[-top : -top + s, -left : -left + s])
    out = np.full((s, s, *content.shape[2:]), pad_value, dtype=content.dtype)
    out[top : top + h, left : left + w] = content
    return out


@timed("resize")
def sizes_from(
    img: np.ndarray,
    upright: tuple[int, int],
    sizes: list[int],
    mode: str,
    pad_value: int,
    nearest: bool = False,
    contents: list[np.ndarray] | None = None,
) -> dict[int, np.ndarray]:
    """Every size from one decode, each from the next larger content (area averaging composes);
    `contents` gets each content, whole (the quality scores read the smallest: scored_copy)."""
    out: dict[int, np.ndarray] = {}
    for size in sorted(sizes, reverse=True):
        g = geometry(upright[0], upright[1], size, mode)
        img = resize(img, g.content, nearest)  # the next smaller size resizes this content
        out[size] = place(img, g, pad_value)
        if contents is not None:
            contents.append(img)
    return out


@timed("encode")
def encode_jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    """(H, W, 3) or (H, W, 1) uint8 -> JFIF bytes (n,) uint8, the same in any process."""
    import simplejpeg

    gray = img.shape[2] == 1
    # 4:2:0 chroma (what PIL, OpenCV and FFCV write) below q95; 4:4:4 for near-lossless.
    data = simplejpeg.encode_jpeg(
        np.ascontiguousarray(img),
        quality=quality,
        colorspace="GRAY" if gray else "RGB",
        colorsubsampling="Gray" if gray else "420" if quality < 95 else "444",
    )
    return np.frombuffer(data, dtype=np.uint8)


def stored(arr: np.ndarray, spec: ArraySpec, quality: int) -> np.ndarray:
    """A sample as its array stores it: as is (raw), flat (ragged) or as JPEG bytes."""
    if spec.codec == "jpeg":
        return encode_jpeg(arr, quality)
    return arr.reshape(-1) if spec.ragged else arr


LEVELS = np.arange(256, dtype=np.int64)


class PixelSums(dict[int, np.ndarray]):
    """One shard's count of each channel's values at each size: (C, 256) int64, exact."""

    def add(self, pixels: dict[int, np.ndarray]) -> None:
        """One sample's uint8 pixels at each size: (H, W, C), or (H, W) gray."""
        for size, arr in pixels.items():
            channels = range(arr.shape[2] if arr.ndim == 3 else 1)
            if arr.shape[0] * arr.shape[1] < 1 << 24:  # float32 counts: exact below 2^24
                got = np.stack([cv2.calcHist([arr], [c], None, [256], [0, 256]) for c in channels])
            else:  # (a channel's np.bincount copies it to int64 first: 5x calcHist's time)
                flat = arr.reshape(-1, len(channels))
                got = np.stack([np.bincount(flat[:, c], minlength=256) for c in channels])
            self[size] = self.get(size, 0) + got.reshape(len(channels), 256).astype(np.int64)

    def record(self) -> dict[str, dict[str, Any]]:
        """Each size's pixel count and its channels' sums of values and of squares (ints)."""
        return {
            str(size): {
                "pixels": int(n.sum(axis=1)[0]),
                "sum": [int(v) for v in n @ LEVELS],
                "sumsq": [int(v) for v in n @ (LEVELS * LEVELS)],
            }
            for size, n in sorted(self.items())
        }


def combine(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """`extra.stats` of the train split's shard records (all without one), or None: 0-255
    units, ddof=0, {"split": "train" | null, "sizes": {"224": {"mean", "std", "pixels"}}}."""
    train = [r for r in records if r["shard"].get("split") == "train"]
    split, train = ("train", train) if train else (None, records)
    if not train or any("stats" not in r for r in train):
        return None
    sizes: dict[str, dict[str, Any]] = {}
    for size in sorted({s for r in train for s in r["stats"]}, key=int):
        parts = [r["stats"][size] for r in train if size in r["stats"]]
        n = sum(p["pixels"] for p in parts)
        if n == 0:
            continue
        s = [sum(v) for v in zip(*(p["sum"] for p in parts), strict=True)]
        q = [sum(v) for v in zip(*(p["sumsq"] for p in parts), strict=True)]
        # Exact integers until the last division: n * q - s^2 is n^2 times the variance.
        mean = [round(si / n, 4) for si in s]
        var = [(n * qi - si * si) / (n * n) for si, qi in zip(s, q, strict=True)]
        std = [round(math.sqrt(v), 4) for v in var]
        sizes[size] = {"mean": mean, "std": std, "pixels": n}
    return {"split": split, "sizes": sizes}
