"""The array registry of format versions 1-3: for each kind of array, what was stored, how it is
checked. A manifest of those versions is checked against it (the same lines as then) before it
is read as version 4 (loaders.format.legacy).

>>> FIELDS["label"].spec(None, max_value=300).dtype
'uint16'
>>> FIELDS["image"].problem(ArraySpec("image", 64, "float64", (64, 64, 3)))
"dtype float64 is not one of ('uint8',)"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaders.format.spec import MAX_SIDE, NUMBERS, UNSIGNED, ArraySpec, smallest_uint

CODECS = ("raw", "ragged", "jpeg")  # the codecs of versions 1 and 2


@dataclass(frozen=True)
class ArrayKind:
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


FIELDS: dict[str, ArrayKind] = {
    f.name: f
    for f in (
        ArrayKind(
            "image", True, _square, ("uint8",), "uint8", CODECS, channels_last=True, pixels=True
        ),
        ArrayKind("mask", True, _plane, ("uint8",), "uint8", CODECS[:2], pixels=True),
        # --mode keep: each sample's stored (h, w) at that size (sides <= 16384 fit uint16).
        ArrayKind("hw", True, lambda s, c: (2,), ("uint16",), "int64", pixels=True),
        # jpeg images: each sample's CRC-32 (zlib.crc32), checked before it is decoded, so that
        # bit rot is a FormatError rather than a picture with a smear.
        ArrayKind("crc", True, lambda s, c: (), ("uint32",), "int64", pixels=True),
        ArrayKind("label", False, lambda s, c: (), UNSIGNED, "int64"),
        # The input a sample (an image, a document) came from: its path relative to SRC, as
        # UTF-8 bytes (encode_source / decode_source); read by the datasets' source(i).
        ArrayKind("source", False, lambda s, c: (), ("uint8",), "uint8", ("ragged",)),
        # The sample's dataset index, which per-sample augmentation draws from (transforms).
        ArrayKind("index", False, lambda s, c: (), ("int64",), "int64", codecs=()),
        # uint32: source sides above 65535 px exist (panoramas, slides).
        ArrayKind("orig_size", False, lambda s, c: (2,), ("uint32",), "int64"),
        # Near-duplicates (prep.inspect.dupes): the image's 64-bit perceptual hash, returned as
        # int64 (the same 64 bits, signed), and the sha256 of its pixels at the smallest size.
        ArrayKind("phash", False, lambda s, c: (), ("uint64",), "int64"),
        ArrayKind("digest", False, lambda s, c: (32,), ("uint8",), "uint8"),
        # Token datasets: one flat array; samples datasets: ragged, a sample's ids each.
        ArrayKind("tokens", False, lambda s, c: (), UNSIGNED[:3], "int64", ("raw", "ragged")),
        ArrayKind("doc_offsets", False, lambda s, c: (), ("int64",), "int64"),
        # Volumes differ in shape, so their arrays are flat: one voxel a sample, back to back
        # per shard, cut into volumes by volume_shape and voxel_offsets (FORMAT.md). Voxels are
        # returned in their stored dtype (int16 HU, uint8 windowed, float16): cast on the GPU.
        ArrayKind("voxels", False, lambda s, c: (), ("int16", "uint8", "float16"), "int16"),
        ArrayKind("label_voxels", False, lambda s, c: (), ("uint8",), "uint8"),
        ArrayKind("volume_shape", False, lambda s, c: (3,), ("uint32",), "int64"),
        ArrayKind("voxel_offsets", False, lambda s, c: (), ("int64",), "int64"),
        # The foreground index: labelled voxels as flat uint32 indices, and per volume the
        # bounds of each class 1..255 in them (256 int64).
        ArrayKind("fg_voxels", False, lambda s, c: (), ("uint32",), "int64"),
        ArrayKind("fg_offsets", False, lambda s, c: (256,), ("int64",), "int64"),
        # --targets: one array per CSV column, its index in `size` (volume_target_0), one value
        # per volume in the smallest dtype; read as float32 when a column is float, else int64.
        ArrayKind("volume_target", True, lambda s, c: (), NUMBERS, "float32"),
        # Table columns (prep table): one array per column, its index in `size` (num_3, cat_0);
        # narrow stored types, widened per batch: numbers to float32, codes to int64.
        ArrayKind("num", True, lambda s, c: (), NUMBERS, "float32"),
        ArrayKind("cat", True, lambda s, c: (), UNSIGNED[:3], "int64"),
        ArrayKind("target", False, lambda s, c: (), NUMBERS, "float32"),  # integer targets: int64
        ArrayKind("missing", True, lambda s, c: (), ("uint8",), "bool"),
        # Samples datasets (loaders.fields): numbers of any shape, fixed or ragged, and byte
        # strings (UTF-8 text, opaque bytes, JSON), ragged. Their array names are the user's.
        ArrayKind("array", False, None, (*NUMBERS, "float64", "bool"), "", ("raw", "ragged")),
        ArrayKind("text", False, lambda s, c: (), ("uint8",), "uint8", ("ragged",)),
        ArrayKind("bytes", False, lambda s, c: (), ("uint8",), "uint8", ("ragged",)),
        ArrayKind("json", False, lambda s, c: (), ("uint8",), "uint8", ("ragged",)),
        # Boxes (x0, y0, x1, y1) in the pixels of an image field as stored at each size.
        ArrayKind(
            "boxes", True, lambda s, c: (4,), ("float32",), "float32", ("ragged",), pixels=True
        ),
        # Instance masks (N, S, S) a sample, ragged in N (mode keep: the image's stored h, w).
        ArrayKind("instances", True, _plane, ("uint8",), "uint8", ("ragged",), pixels=True),
        # Keypoints (N, K, 3): x, y in the pixels of an image field as stored, visibility.
        ArrayKind("keypoints", True, None, ("float32",), "float32", ("ragged",), pixels=True),
        # Videos (prep video): a video's frames back to back, raw (h * w * C each) or as one
        # JPEG file each; the shape is one frame's at `size` (each video's (h, w) in its hw).
        # frame_ends: per video, where each frame's bytes end in the video's data.
        ArrayKind("video", True, _square, ("uint8",), "uint8", CODECS[1:], True, pixels=True),
        ArrayKind(
            "frame_ends", True, lambda s, c: (), ("int64",), "int64", ("ragged",), pixels=True
        ),
    )
}
