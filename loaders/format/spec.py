"""The leaf of the format, which the fields and the manifest's schema both build on: the error
every check raises, an array's declaration, a shard's record, and the names both sides use."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

import numpy as np

try:  # the same CRC-32 as zlib's (a JPEG sample's checksum), in SIMD: 25 KB in 1.2 us against
    from zlib_ng.zlib_ng import crc32  # zlib's 15-19 (a bench sample's 2% of its decode)
except ImportError:  # a platform without its wheel
    from zlib import crc32  # noqa: F401 - the others import it from here

CODECS = ("raw", "ragged", "jpeg", "flat")  # docs/format.md, "manifest.json": how samples lie
OFFSETS = ".offsets"  # Manifest.ref(shard, "image_256.offsets"): a ragged array's offsets
SHA256 = re.compile(r"[0-9a-f]{64}")  # a file's digest, lowercase hex (a cache's file name)
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


class FormatError(ValueError):
    """The dataset folder does not match its manifest, or the manifest is not one we read.

    Examples:
        >>> from loaders import FormatError, ImageShardDataset
        >>> try:
        ...     ImageShardDataset("data/demo-raw")  # raw images: no manifest.json
        ... except FormatError as e:
        ...     print("refused")
        refused
    """


def problems_error(problems: list[str]) -> FormatError:
    """One FormatError line for check_files' problems: the first three, and how many more."""
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return FormatError("; ".join(problems[:3]) + more + ". HINT: run `prep verify`, repack")


@dataclass(frozen=True)
class ArraySpec:
    """One array: `field` at `size` px (None: size-free); `shape` one sample's (ragged: a row's)."""

    field: str
    size: int | None
    dtype: str
    shape: tuple[int, ...]  # mode keep: the largest; each sample's (h, w) is in NAME_hw_SIZE
    codec: str = "raw"
    role: str | None = None  # what it is to its field (an image's "hw"): never stored
    # docs/format.md, "Compressed arrays": "zstd" frames of `chunk` rows (ragged: elements) each
    compress: str | None = None
    chunk: int = 0
    level: int = 0  # the writer's zstd level: a record, readers do not need it

    @property
    def ragged(self) -> bool:
        """Stored as flat data plus offsets (one sample a range of it)."""
        return self.codec in ("ragged", "jpeg")

    def stored(self) -> dict[str, Any]:
        """The manifest's entry: what a reader with numpy alone needs (not the role)."""
        kept = {k: getattr(self, k) for k in ("field", "size", "dtype", "codec")}
        packed = {k: getattr(self, k) for k in ("compress", "chunk", "level")}
        return kept | {"shape": list(self.shape)} | (packed if self.compress else {})


@dataclass
class ArrayRef:
    file: str
    length: int  # first-axis length: samples, or (ragged, flat) the data's elements
    key: str | None = None  # dataset name inside an .h5 file; None for .npy
    offsets: ArrayRef | None = None  # ragged: count + 1 int64 offsets into the data

    @classmethod
    def from_dict(cls, a: dict[str, Any]) -> ArrayRef:
        off = a.get("offsets")
        return cls(a["file"], a["length"], a.get("key"), None if off is None else cls(**off))


@dataclass
class FileInfo:
    bytes: int
    sha256: str


@dataclass
class Shard:
    count: int
    arrays: dict[str, ArrayRef]
    files: dict[str, FileInfo]
    split: str | None = None

    @classmethod
    def from_dict(cls, s: dict[str, Any]) -> Shard:
        arrays = {k: ArrayRef.from_dict(a) for k, a in s["arrays"].items()}
        files = {k: FileInfo(**f) for k, f in s["files"].items()}
        return cls(s["count"], arrays, files, s.get("split"))

    def refs(self) -> dict[str, ArrayRef]:
        """Every array, a ragged one's offsets too (as `NAME + OFFSETS`, Manifest.ref's name)."""
        offsets = {a + OFFSETS: r.offsets for a, r in self.arrays.items() if r.offsets}
        return {**self.arrays, **offsets}


def array_name(field_name: str, size: int | None) -> str:
    """`image_256` for a sized field, `label` for a size-free one."""
    return field_name if size is None else f"{field_name}_{size}"


def is_sha256(value: object) -> bool:
    """Whether `value` is a sha256 digest as prep writes it (a remote cache names files by it)."""
    return isinstance(value, str) and SHA256.fullmatch(value) is not None


def count(value: Any) -> TypeGuard[int]:
    """A number of things: a non-negative int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def array_spec(name: str, v: dict[str, Any], pixels: bool = True) -> ArraySpec:
    """An array's entry, checked (plain numbers: never unpickled); `pixels`: a size is in px."""
    spec = ArraySpec(v["field"], v["size"], v["dtype"], tuple(v["shape"]), v.get("codec", "raw"))
    if "compress" in v:
        spec = replace(
            spec, compress=v["compress"], chunk=v.get("chunk", 0), level=v.get("level", 0)
        )
    try:
        dtype = np.dtype(spec.dtype)
    except (TypeError, ValueError, SyntaxError) as e:  # "a,b" is parsed as a record's fields
        raise FormatError(f"array {name}: dtype {spec.dtype!r} is not a numpy dtype") from e
    if dtype.kind not in "biuf" or dtype.hasobject:
        raise FormatError(f"array {name}: dtype {spec.dtype!r} is not a plain numeric dtype")
    if not all(count(n) for n in spec.shape):
        raise FormatError(f"array {name}: shape {list(spec.shape)} is not a list of sizes")
    sized = spec.size is None or (count(spec.size) and (not pixels or 1 <= spec.size <= MAX_SIDE))
    if not sized:
        raise FormatError(f"array {name}: size {spec.size} is not 1..{MAX_SIDE} px")
    if name != array_name(spec.field, spec.size):
        raise FormatError(
            f"array {name}: field {spec.field!r} at size {spec.size!r} is not named {name!r}"
        )
    if spec.codec not in CODECS:
        raise FormatError(f"array {name}: codec {spec.codec!r} is not one of {CODECS}")
    if spec.compress is not None and not (
        spec.compress == "zstd"
        and spec.codec in ("raw", "ragged")
        and count(spec.chunk)
        and spec.chunk >= 1
        and isinstance(spec.level, int)
    ):
        raise FormatError(
            f"array {name}: compress {spec.compress!r} (chunk {spec.chunk!r}) is not zstd of "
            "at least 1 row a chunk on a raw or ragged array. HINT: repack"
        )
    return spec


def check_shard(index: int, shard: Shard, arrays: dict[str, ArraySpec]) -> None:
    if not count(shard.count) or shard.count >= 2**63:  # counts() sums them as int64
        raise FormatError(f"shard {index}: count {shard.count!r} is not a number of samples")
    if not (shard.split is None or (isinstance(shard.split, str) and shard.split)):
        raise FormatError(f"shard {index}: split {str(shard.split)[:40]!r} is not a name")
    for name, ref in shard.arrays.items():
        refs = [ref] if ref.offsets is None else [ref, ref.offsets]
        keys = [r.key is None or (isinstance(r.key, str) and r.key) for r in refs]  # None: .npy
        if not all(count(r.length) and isinstance(r.file, str) for r in refs) or not all(keys):
            raise FormatError(f"shard {index}: array {name} has a bad file or length")
        spec = arrays.get(name)
        if spec is not None and spec.ragged != (ref.offsets is not None):
            raise FormatError(
                f"shard {index}: array {name} is {spec.codec} but "
                f"{'has no' if spec.ragged else 'has'} offsets"
            )
    for rel, info in shard.files.items():
        if not count(info.bytes) or not is_sha256(info.sha256):
            raise FormatError(f"shard {index}: file {rel} has a bad byte size or sha256")
