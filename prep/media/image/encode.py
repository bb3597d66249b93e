"""How a sample is stored: mode keep's shapes, JPEG encoding (prep.run.shardwriter writes it).

Arrays in, bytes out; the shard task (prep.kinds.images.pack) calls these once per sample.
"""

from __future__ import annotations

import numpy as np

from loaders.format import ArraySpec
from prep.media.image.geometry import geometry
from prep.run.profile import timed


def keep_side(h: int, w: int, size: int) -> tuple[int, int]:
    """Mode keep: (h, w) scaled so that the longer side is at most `size`, never enlarged.

    >>> keep_side(3024, 4032, 256), keep_side(100, 50, 256), keep_side(1, 5000, 64)
    ((192, 256), (100, 50), (1, 64))
    """
    return geometry(h, w, size, "keep").content


def subsampling(quality: int) -> str:
    """4:2:0 chroma (what PIL, OpenCV and FFCV write) below q95; 4:4:4 for near-lossless."""
    return "420" if quality < 95 else "444"


@timed("encode")
def encode_jpeg(img: np.ndarray, quality: int) -> np.ndarray:
    """(H, W, 3) or (H, W, 1) uint8 -> the bytes of a baseline JFIF file, as uint8 (n,).
    libjpeg-turbo (simplejpeg): the same bytes for the same pixels, in any process."""
    import simplejpeg

    gray = img.shape[2] == 1
    data = simplejpeg.encode_jpeg(
        np.ascontiguousarray(img),
        quality=quality,
        colorspace="GRAY" if gray else "RGB",
        colorsubsampling="Gray" if gray else subsampling(quality),
    )
    return np.frombuffer(data, dtype=np.uint8)


def stored(arr: np.ndarray, spec: ArraySpec, quality: int) -> np.ndarray:
    """A sample as its array stores it: as is (raw), flat (ragged) or as JPEG bytes."""
    if spec.codec == "jpeg":
        return encode_jpeg(arr, quality)
    return arr.reshape(-1) if spec.ragged else arr
