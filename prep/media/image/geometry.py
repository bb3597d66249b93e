"""Where a decoded image goes (the geometry of each size and mode: resize to `content`, then crop
or pad), every size made from one decode, and how a sample is stored. Arrays in, arrays out."""

from __future__ import annotations

from dataclasses import dataclass

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
    if mode == "fill":
        ch, cw = max(ch, size), max(cw, size)
    else:
        ch, cw = min(ch, size), min(cw, size)
    return Geometry((ch, cw), size, mode)


def resize(img: np.ndarray, hw: tuple[int, int], nearest: bool = False) -> np.ndarray:
    """Shrink without aliasing, cheaply: bilinear while the factor is under ~2 (it still reads
    every source pixel; a DCT-reduced JPEG always is), area averaging beyond; bilinear to
    enlarge; nearest for class-id masks. (Bench photos: 0.9 levels from full-size INTER_AREA,
    at 1/5 of its cost.)"""
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
) -> dict[int, np.ndarray]:
    """Every size from one decode, each from the next larger content (area averaging composes)."""
    out: dict[int, np.ndarray] = {}
    src = img
    for size in sorted(sizes, reverse=True):
        g = geometry(upright[0], upright[1], size, mode)
        content = resize(src, g.content, nearest)
        out[size] = place(content, g, pad_value)
        src = content
    return out


@timed("encode")
def encode_jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    """(H, W, 3) or (H, W, 1) uint8 -> a baseline JFIF file's bytes, uint8 (n,): the same
    bytes for the same pixels in any process (libjpeg-turbo)."""
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
