"""The field registry: for each kind of field, what is stored, how it is checked, what it becomes.

Writers (`prep`) ask a field for the spec of the array to write; readers (`loaders`) check every
array of a manifest against its field and turn its samples into tensors the field's way. Adding
a field kind is one entry in `FIELDS`. Imports neither torch nor anything of `prep`.

>>> FIELDS["label"].spec(None, max_value=300).dtype
'uint16'
>>> FIELDS["image"].problem(ArraySpec("image", 64, "float64", (64, 64, 3)))
"dtype float64 is not one of ('uint8',)"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.format.spec import CODECS, ArraySpec

UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
# The largest side in px of a sized pixel field: prep's largest --sizes, and what a reader may
# allocate a batch for before any file is read (hw stores sides as uint16).
MAX_SIDE = 16384
VIDEO_MODES = ("short", "fill", "fit", "keep")  # video frames; short: the shorter side to size
NUMBERS = ("float32", "float16", "int8", "int16", "int32", "int64", *UNSIGNED)


def smallest_uint(max_value: int) -> str:
    """The narrowest unsigned dtype holding 0..max_value: 255 fits uint8, 256 needs uint16.

    >>> smallest_uint(255), smallest_uint(256), smallest_uint(65536)
    ('uint8', 'uint16', 'uint32')
    """
    if not 0 <= max_value < 2**64:
        raise ValueError(f"{max_value} does not fit an unsigned 64-bit integer")
    return np.min_scalar_type(max_value).name


@dataclass(frozen=True)
class Field:
    """One kind of field.

    `shape(size, channels)` is the shape of one stored sample; `dtypes` the stored dtypes a
    reader accepts (the first is what a writer stores when no `max_value` narrows it);
    `out_dtype` the dtype of the tensor a dataset returns; `codecs` how samples may be stored
    (`raw`: fixed-shape samples, memory-mapped; `ragged`: samples of their own shapes, flat with
    offsets; `jpeg`: JPEG bytes, flat with offsets; none: never stored, made by the dataset)."""

    name: str
    sized: bool  # one array per size (image_256), or one for all sizes (label)
    shape: Callable[[int | None, int], tuple[int, ...]] | None  # None: any shape (samples)
    dtypes: tuple[str, ...]
    out_dtype: str
    codecs: tuple[str, ...] = ("raw",)
    channels_last: bool = False  # stored HWC, returned (C, H, W) as a view: no copy
    pixels: bool = False  # sized in px (1..MAX_SIDE), not by a column's index

    def spec(
        self,
        size: int | None,
        *,
        channels: int = 3,
        max_value: int | None = None,
        codec: str = "raw",
    ) -> ArraySpec:
        """The array a writer stores for this field at `size` (None for size-free fields);
        `max_value`: the largest value it will hold, for fields stored in the smallest dtype."""
        dtype = self.dtypes[0] if max_value is None else smallest_uint(max_value)
        if dtype not in self.dtypes:
            raise ValueError(f"{self.name}: {max_value} needs {dtype}, not one of {self.dtypes}")
        if codec not in self.codecs:
            raise ValueError(f"{self.name}: codec {codec} is not one of {self.codecs}")
        if self.shape is None:
            raise ValueError(f"{self.name}: a field of any shape is declared by its sample field")
        shape = self.shape(size, channels)
        return ArraySpec(self.name, size if self.sized else None, dtype, shape, codec)

    def problem(self, spec: ArraySpec) -> str | None:
        """Why `spec` is not an array of this field (None when it is)."""
        if not self.codecs:
            return f"field {self.name} is made by the dataset, never stored"
        if spec.codec not in self.codecs:
            return f"codec {spec.codec} is not one of {self.codecs}"
        if spec.dtype not in self.dtypes:
            return f"dtype {spec.dtype} is not one of {self.dtypes}"
        if (spec.size is not None) != self.sized:
            return f"field {self.name} is {'sized' if self.sized else 'size-free'}"
        if self.pixels and not 1 <= (spec.size or 0) <= MAX_SIDE:
            return f"size {spec.size} is not 1..{MAX_SIDE} px"
        if self.shape is None:
            return None
        channels = spec.shape[-1] if self.channels_last and spec.shape else 3
        if channels not in (1, 3) or tuple(spec.shape) != self.shape(spec.size, channels):
            return f"shape {list(spec.shape)} is not {self.name}'s at size {spec.size}"
        return None

    def to_tensor(self, batch: Any) -> Any:
        """A batch tensor (B, *shape) as the dataset returns it: images as channels-last
        (B, C, H, W) views of their HWC storage."""
        return batch.permute(0, 3, 1, 2) if self.channels_last else batch


def _square(size: int | None, channels: int) -> tuple[int, ...]:
    return (size or 0, size or 0, channels)


def _plane(size: int | None, channels: int) -> tuple[int, ...]:
    return (size or 0, size or 0)


FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("image", True, _square, ("uint8",), "uint8", CODECS, channels_last=True, pixels=True),
        Field("mask", True, _plane, ("uint8",), "uint8", CODECS[:2], pixels=True),
        # --mode keep: each sample's stored (h, w) at that size (sides <= 16384 fit uint16).
        Field("hw", True, lambda s, c: (2,), ("uint16",), "int64", pixels=True),
        # jpeg images: each sample's CRC-32 (zlib.crc32), checked before it is decoded, so that
        # bit rot is a FormatError rather than a picture with a smear.
        Field("crc", True, lambda s, c: (), ("uint32",), "int64", pixels=True),
        Field("label", False, lambda s, c: (), UNSIGNED, "int64"),
        # The input a sample (an image, a document) came from: its path relative to SRC, as
        # UTF-8 bytes (encode_source / decode_source); read by the datasets' source(i).
        Field("source", False, lambda s, c: (), ("uint8",), "uint8", ("ragged",)),
        # The sample's dataset index, which per-sample augmentation draws from (transforms).
        Field("index", False, lambda s, c: (), ("int64",), "int64", codecs=()),
        # uint32: source sides above 65535 px exist (panoramas, slides).
        Field("orig_size", False, lambda s, c: (2,), ("uint32",), "int64"),
        # Near-duplicates (prep.inspect.dupes): the image's 64-bit perceptual hash, returned as
        # int64 (the same 64 bits, signed), and the sha256 of its pixels at the smallest size.
        Field("phash", False, lambda s, c: (), ("uint64",), "int64"),
        Field("digest", False, lambda s, c: (32,), ("uint8",), "uint8"),
        # Token datasets: one flat array; samples datasets: ragged, a sample's ids each.
        Field("tokens", False, lambda s, c: (), UNSIGNED[:3], "int64", ("raw", "ragged")),
        Field("doc_offsets", False, lambda s, c: (), ("int64",), "int64"),
        # Volumes differ in shape, so their arrays are flat: one voxel a sample, back to back
        # per shard, cut into volumes by volume_shape and voxel_offsets (FORMAT.md). Voxels are
        # returned in their stored dtype (int16 HU, uint8 windowed, float16): cast on the GPU.
        Field("voxels", False, lambda s, c: (), ("int16", "uint8", "float16"), "int16"),
        Field("label_voxels", False, lambda s, c: (), ("uint8",), "uint8"),
        Field("volume_shape", False, lambda s, c: (3,), ("uint32",), "int64"),
        Field("voxel_offsets", False, lambda s, c: (), ("int64",), "int64"),
        # The foreground index: labelled voxels as flat uint32 indices, and per volume the
        # bounds of each class 1..255 in them (256 int64).
        Field("fg_voxels", False, lambda s, c: (), ("uint32",), "int64"),
        Field("fg_offsets", False, lambda s, c: (256,), ("int64",), "int64"),
        # --targets: one array per CSV column, its index in `size` (volume_target_0), one value
        # per volume in the smallest dtype; read as float32 when a column is float, else int64.
        Field("volume_target", True, lambda s, c: (), NUMBERS, "float32"),
        # Table columns (prep table): one array per column, its index in `size` (num_3, cat_0);
        # narrow stored types, widened per batch: numbers to float32, codes to int64.
        Field("num", True, lambda s, c: (), NUMBERS, "float32"),
        Field("cat", True, lambda s, c: (), UNSIGNED[:3], "int64"),
        Field("target", False, lambda s, c: (), NUMBERS, "float32"),  # integer targets: int64
        Field("missing", True, lambda s, c: (), ("uint8",), "bool"),
        # Samples datasets (loaders.fields): numbers of any shape, fixed or ragged, and byte
        # strings (UTF-8 text, opaque bytes, JSON), ragged. Their array names are the user's.
        Field("array", False, None, (*NUMBERS, "float64", "bool"), "", ("raw", "ragged")),
        Field("text", False, lambda s, c: (), ("uint8",), "uint8", ("ragged",)),
        Field("bytes", False, lambda s, c: (), ("uint8",), "uint8", ("ragged",)),
        Field("json", False, lambda s, c: (), ("uint8",), "uint8", ("ragged",)),
        # Boxes (x0, y0, x1, y1) in the pixels of an image field as stored at each size.
        Field("boxes", True, lambda s, c: (4,), ("float32",), "float32", ("ragged",), pixels=True),
        # Instance masks (N, S, S) a sample, ragged in N (mode keep: the image's stored h, w).
        Field("instances", True, _plane, ("uint8",), "uint8", ("ragged",), pixels=True),
        # Keypoints (N, K, 3): x, y in the pixels of an image field as stored, visibility.
        Field("keypoints", True, None, ("float32",), "float32", ("ragged",), pixels=True),
        # Videos (prep video): a video's frames back to back, raw (h * w * C each) or as one
        # JPEG file each; the shape is one frame's at `size` (each video's (h, w) in its hw).
        # frame_ends: per video, where each frame's bytes end in the video's data.
        Field("video", True, _square, ("uint8",), "uint8", CODECS[1:], True, pixels=True),
        Field("frame_ends", True, lambda s, c: (), ("int64",), "int64", ("ragged",), pixels=True),
    )
}


def encode_source(path: str) -> np.ndarray:
    """A source path as stored: its UTF-8 bytes, uint8 (n,) (surrogates from undecodable file
    names kept as their bytes).

    >>> decode_source(encode_source("cat/001.jpg"))
    'cat/001.jpg'
    """
    return np.frombuffer(path.encode("utf-8", "surrogateescape"), dtype=np.uint8)


def decode_source(data: np.ndarray) -> str:
    """A stored source path back as text (bytes that are not UTF-8 shown as U+FFFD)."""
    return np.asarray(data, dtype=np.uint8).tobytes().decode("utf-8", "replace")
