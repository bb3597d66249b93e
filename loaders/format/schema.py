"""The on-disk contract between `prep` (writer) and `loaders` (reader). See FORMAT.md.

A packed dataset is a folder. `manifest.json` is written last, atomically; a folder without it is
an unfinished run. The manifest lists every array (its field, size, dtype and per-sample shape)
and every shard (its sample count, the file and first-axis length of each array, and the byte
size and sha256 of each file). Arrays are `.npy` files (one per array and shard) or datasets in
one contiguous, uncompressed `.h5` file per shard; either way they are read as memory maps.

Version 2 adds a codec per array: `raw` (fixed-shape samples), `ragged` (samples of their own
shapes back to back) and `jpeg` (one JPEG file's bytes a sample, back to back). A ragged or jpeg
array is a flat uint8 data array plus int64 offsets: sample i is data[off[i]:off[i + 1]].
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

import loaders.format.kinds as registry  # a module: it builds on loaders.format.spec alone
from loaders.format.extras import check_extra
from loaders.format.spec import (  # noqa: F401  (re-exported: the contract's names, in one place)
    CODECS,
    OFFSETS,
    SHA256,
    ArraySpec,
    FormatError,
    array_name,
    is_sha256,
)

FORMAT_NAME = "prep"
FORMAT_VERSION = 2  # what prep writes for images, tokens, volumes and tables
# Version 3 adds the samples kind: arrays of any field name, each naming its field kind (`kind`,
# an entry of loaders.format.kinds.FIELDS), described in `extra.fields` (loaders.fields).
SAMPLES_VERSION = 3
READ_VERSIONS = (1, 2)  # what loaders read of the four kinds: version 1 is 2 with raw arrays only
MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"
# A fixed-size .npy header lets a writer stream samples first and fill in the count last,
# and puts the data of every .npy file at the same offset. 128 bytes holds any 4-D shape.
NPY_HEADER_BYTES = 128
STORAGES = ("npy", "h5")
KINDS = ("images", "tokens", "volumes", "table", "samples")


@dataclass
class ArrayRef:
    file: str
    length: int  # first-axis length: samples, or (ragged) the data's elements
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
        return cls(
            count=s["count"],
            arrays={k: ArrayRef.from_dict(a) for k, a in s["arrays"].items()},
            files={k: FileInfo(**f) for k, f in s["files"].items()},
            split=s.get("split"),
        )

    def refs(self) -> dict[str, ArrayRef]:
        """Every array, a ragged one's offsets too (as `NAME + OFFSETS`, Manifest.ref's name)."""
        offsets = {a + OFFSETS: r.offsets for a, r in self.arrays.items() if r.offsets}
        return {**self.arrays, **offsets}


@dataclass
class Manifest:
    kind: str  # "images" or "tokens"
    storage: str  # "npy" or "h5"
    arrays: dict[str, ArraySpec]
    shards: list[Shard]
    config: dict[str, Any] = field(default_factory=dict)
    classes: list[str] | None = None
    rejects: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    tool_version: str = ""
    format_version: int = FORMAT_VERSION

    @property
    def num_samples(self) -> int:
        return sum(s.count for s in self.shards)

    def to_json(self) -> str:
        # `extra` as it is: asdict deep-copies (0.4 s for the vocabularies of a 1M-row table).
        d = {**asdict(replace(self, extra={})), "extra": self.extra}
        for a in d["arrays"].values():
            if a["kind"] is None:  # versions 1 and 2 have no array kinds
                del a["kind"]
        d = {"format": FORMAT_NAME, "num_samples": self.num_samples, **d}
        return json.dumps(d, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, data: bytes, source: object) -> Manifest:
        """The manifest in `data` (the bytes of `source`, named in errors); not checked against
        the files (see loaders.format.check_files)."""
        try:
            d = json.loads(data.decode("utf-8"))
            if not isinstance(d, dict):
                raise TypeError(f"a JSON {type(d).__name__}, not an object")
            return cls.from_dict(d)
        except FormatError as e:
            raise FormatError(f"{source}: {e}") from e
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # JSON and schema errors
            raise FormatError(f"{source} is malformed ({e!r}). HINT: repack the dataset") from e
        except RecursionError as e:  # JSON nested thousands deep: no manifest of prep's
            raise FormatError(f"{source} is nested too deep. HINT: repack the dataset") from e

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        if d.get("format") != FORMAT_NAME:
            raise FormatError("not a prep manifest (no 'format': 'prep')")
        version: int = d.get("format_version")  # type: ignore[assignment]  # checked next
        reads = (SAMPLES_VERSION,) if d.get("kind") == "samples" else READ_VERSIONS
        if version not in reads or isinstance(version, bool):
            raise FormatError(
                f"format version {version} is not one of {list(reads)}. "
                "HINT: repack with this version of prep, or install the prep that wrote it."
            )
        arrays = {
            k: ArraySpec(
                v["field"],
                v["size"],
                v["dtype"],
                tuple(v["shape"]),
                v.get("codec", "raw"),
                v.get("kind") if version >= SAMPLES_VERSION else None,
            )
            for k, v in d["arrays"].items()
        }
        for name, spec in arrays.items():
            _check_spec(name, spec)
            if spec.ragged and version < 2:
                raise FormatError(f"array {name}: codec {spec.codec} needs format version 2")
        shards = [Shard.from_dict(s) for s in d["shards"]]
        for i, shard in enumerate(shards):
            _check_shard(i, shard, arrays)
        if d["kind"] not in KINDS or d["storage"] not in STORAGES:
            raise FormatError(
                f"kind {d['kind']!r} / storage {d['storage']!r} is not one of {KINDS} / {STORAGES}"
            )
        classes = d.get("classes")
        if classes is not None and not (
            isinstance(classes, list) and all(isinstance(c, str) for c in classes)
        ):
            raise FormatError(f"classes {str(classes)[:40]} is not a list of names or null")
        total = sum(s.count for s in shards)
        if d.get("num_samples", total) != total:
            raise FormatError(
                f"the manifest says {d['num_samples']} samples but its shards hold {total}"
            )
        check_extra(d, arrays, total)
        return cls(
            kind=d["kind"],
            storage=d["storage"],
            arrays=arrays,
            shards=shards,
            config=d.get("config", {}),
            classes=classes,
            rejects=d.get("rejects", 0),
            extra=d.get("extra", {}),
            tool_version=d.get("tool_version", ""),
            format_version=version,
        )

    def ref(self, shard: int, name: str) -> tuple[ArrayRef, ArraySpec]:
        """Where array `name` of shard `shard` is and what it holds; `name + OFFSETS` is a
        ragged array's offsets (int64, count + 1)."""
        if name.endswith(OFFSETS):
            name = name.removesuffix(OFFSETS)
            spec = self.arrays[name]
            off = self.shards[shard].arrays[name].offsets
            assert off is not None  # checked when the manifest was read
            return off, ArraySpec(spec.field, spec.size, "int64", ())
        return self.shards[shard].arrays[name], self.arrays[name]

    def fields(self) -> list[str]:
        return sorted({a.field for a in self.arrays.values()})

    def array_for(self, field_name: str, size: int) -> str:
        """The array holding `field_name` at `size`: its sized one, or the size-free one."""
        sized = array_name(field_name, size)
        return sized if sized in self.arrays else field_name

    def sizes(self) -> list[int]:
        return sorted({a.size for a in self.arrays.values() if a.size is not None})


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _names(file: object, key: object) -> bool:
    """A file name, and a dataset name in it (.h5) or None (.npy)."""
    return isinstance(file, str) and (key is None or (isinstance(key, str) and bool(key)))


def _check_spec(name: str, spec: ArraySpec) -> None:
    """Plain numbers only: a dtype holding Python objects would make numpy unpickle."""
    try:
        dtype = np.dtype(spec.dtype)
    except (TypeError, ValueError, SyntaxError) as e:  # "a,b" is parsed as a record's fields
        raise FormatError(f"array {name}: dtype {spec.dtype!r} is not a numpy dtype") from e
    if dtype.kind not in "biuf" or dtype.hasobject:
        raise FormatError(f"array {name}: dtype {spec.dtype!r} is not a plain numeric dtype")
    if not all(_count(n) for n in spec.shape):
        raise FormatError(f"array {name}: shape {list(spec.shape)} is not a list of sizes")
    if not (spec.size is None or _count(spec.size)) or name != array_name(spec.field, spec.size):
        raise FormatError(
            f"array {name}: field {spec.field!r} at size {spec.size!r} is not named {name!r}"
        )
    FIELDS = registry.FIELDS
    kind = FIELDS.get(spec.kind or spec.field)
    if kind is None:
        raise FormatError(
            f"array {name}: field {spec.kind or spec.field!r} is not one of {sorted(FIELDS)}"
        )
    if spec.codec not in CODECS:
        raise FormatError(f"array {name}: codec {spec.codec!r} is not one of {CODECS}")
    problem = kind.problem(spec)
    if problem is not None:
        raise FormatError(f"array {name}: {problem}")


def _check_shard(index: int, shard: Shard, arrays: dict[str, ArraySpec]) -> None:
    if not _count(shard.count):
        raise FormatError(f"shard {index}: count {shard.count!r} is not a number of samples")
    for name, ref in shard.arrays.items():
        refs = [ref] if ref.offsets is None else [ref, ref.offsets]
        if not all(_count(r.length) and _names(r.file, r.key) for r in refs):
            raise FormatError(f"shard {index}: array {name} has a bad file or length")
        spec = arrays.get(name)
        if spec is not None and spec.ragged != (ref.offsets is not None):
            raise FormatError(
                f"shard {index}: array {name} is {spec.codec} but "
                f"{'has no' if spec.ragged else 'has'} offsets"
            )
    for rel, info in shard.files.items():
        if not _count(info.bytes) or not is_sha256(info.sha256):
            raise FormatError(f"shard {index}: file {rel} has a bad byte size or sha256")
