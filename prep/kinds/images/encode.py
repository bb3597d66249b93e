"""How a sample is stored: mode keep's shapes, JPEG encoding, ragged array writing.

Arrays in, bytes out; the shard task (prep.kinds.images.pack) calls these once per sample.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loaders.format import ArraySpec
from prep.kinds.images.decode import geometry
from prep.run.files import NpyWriter
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


class RaggedWriter:
    """Streams samples of any length into a flat .npy (uint8) and their count + 1 int64
    offsets into another: sample i is data[off[i]:off[i + 1]]."""

    def __init__(self, data: Path, offsets: Path, dtype: str):
        self.data = NpyWriter(data, dtype, ())
        try:
            self.offsets = NpyWriter(offsets, "int64", ())
        except BaseException:
            self.data.abort()
            raise
        self.offsets.append(np.zeros((), np.int64))

    @property
    def length(self) -> int:
        return self.data.length

    def append(self, sample: np.ndarray) -> None:
        self.data.extend(sample.reshape(-1))
        self.offsets.append(np.asarray(self.data.length, np.int64))

    def close(self) -> None:
        try:
            self.data.close()
            self.offsets.close()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        self.data.abort()
        self.offsets.abort()
