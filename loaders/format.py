"""The on-disk contract between `prep` (writer) and `loaders` (reader). See FORMAT.md.

A packed dataset is a folder. `manifest.json` is written last, atomically; a folder without it is
an unfinished run. The manifest lists every array (its field, size, dtype and per-sample shape)
and every shard (its sample count, the file and first-axis length of each array, and the byte
size and sha256 of each file). Arrays are `.npy` files (one per array and shard) or datasets in
one contiguous, uncompressed `.h5` file per shard; either way they are read as memory maps.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

FORMAT_NAME = "prep"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"
# A fixed-size .npy header lets a writer stream samples first and fill in the count last,
# and puts the data of every .npy file at the same offset. 128 bytes holds any 4-D shape.
NPY_HEADER_BYTES = 128
STORAGES = ("npy", "h5")
KINDS = ("images", "tokens")


class FormatError(ValueError):
    """The dataset folder does not match its manifest, or the manifest is not one we read."""


@dataclass(frozen=True)
class ArraySpec:
    """One array of the dataset: `field` at `size` px (None for size-free fields like labels).

    `shape` is the shape of one sample (one token for token arrays); the array on disk is
    (length, *shape)."""

    field: str
    size: int | None
    dtype: str
    shape: tuple[int, ...]


@dataclass
class ArrayRef:
    file: str
    length: int
    key: str | None = None  # dataset name inside an .h5 file; None for .npy


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
            arrays={k: ArrayRef(**a) for k, a in s["arrays"].items()},
            files={k: FileInfo(**f) for k, f in s["files"].items()},
            split=s.get("split"),
        )


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
        d = asdict(self)
        d = {"format": FORMAT_NAME, "num_samples": self.num_samples, **d}
        return json.dumps(d, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        if d.get("format") != FORMAT_NAME:
            raise FormatError("not a prep manifest (no 'format': 'prep')")
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            raise FormatError(
                f"format version {version} is not {FORMAT_VERSION}. "
                "HINT: repack with this version of prep, or install the prep that wrote it."
            )
        arrays = {
            k: ArraySpec(v["field"], v["size"], v["dtype"], tuple(v["shape"]))
            for k, v in d["arrays"].items()
        }
        for name, spec in arrays.items():
            _check_spec(name, spec)
        shards = [Shard.from_dict(s) for s in d["shards"]]
        for i, shard in enumerate(shards):
            _check_shard(i, shard)
        if d["kind"] not in KINDS or d["storage"] not in STORAGES:
            raise FormatError(
                f"kind {d['kind']!r} / storage {d['storage']!r} is not one of {KINDS} / {STORAGES}"
            )
        total = sum(s.count for s in shards)
        if d.get("num_samples", total) != total:
            raise FormatError(
                f"the manifest says {d['num_samples']} samples but its shards hold {total}"
            )
        return cls(
            kind=d["kind"],
            storage=d["storage"],
            arrays=arrays,
            shards=shards,
            config=d.get("config", {}),
            classes=d.get("classes"),
            rejects=d.get("rejects", 0),
            extra=d.get("extra", {}),
            tool_version=d.get("tool_version", ""),
            format_version=version,
        )

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


def _check_spec(name: str, spec: ArraySpec) -> None:
    """Plain numbers only: a dtype holding Python objects would make numpy unpickle."""
    try:
        dtype = np.dtype(spec.dtype)
    except TypeError as e:
        raise FormatError(f"array {name}: dtype {spec.dtype!r} is not a numpy dtype") from e
    if dtype.kind not in "biuf" or dtype.hasobject:
        raise FormatError(f"array {name}: dtype {spec.dtype!r} is not a plain numeric dtype")
    if not all(_count(n) for n in spec.shape):
        raise FormatError(f"array {name}: shape {list(spec.shape)} is not a list of sizes")
    if not (spec.size is None or _count(spec.size)) or name != array_name(spec.field, spec.size):
        raise FormatError(
            f"array {name}: field {spec.field!r} at size {spec.size!r} is not named {name!r}"
        )


def _check_shard(index: int, shard: Shard) -> None:
    if not _count(shard.count):
        raise FormatError(f"shard {index}: count {shard.count!r} is not a number of samples")
    for name, ref in shard.arrays.items():
        if not _count(ref.length) or not isinstance(ref.file, str):
            raise FormatError(f"shard {index}: array {name} has a bad file or length")
    for rel, info in shard.files.items():
        if not _count(info.bytes) or not isinstance(info.sha256, str):
            raise FormatError(f"shard {index}: file {rel} has a bad byte size or sha256")


def array_name(field_name: str, size: int | None) -> str:
    """`image_256` for a sized field, `label` for a size-free one."""
    return field_name if size is None else f"{field_name}_{size}"


# ---------------------------------------------------------------- writing helpers (used by prep)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def named(e: OSError, path: Path | str) -> OSError:
    """`e` with the file it is about: a failed write() or fsync() does not say which file."""
    if e.filename is not None:
        return e
    return OSError(e.errno, e.strerror or str(e), str(path))


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise named(e, path) from e


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temp file beside `path`, fsync, then rename: readers see all or nothing.

    An OSError (disk full...) names the file; no temp file is left behind."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise named(e, tmp) from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    """A version 1.0 .npy header padded to exactly NPY_HEADER_BYTES."""
    d = np.lib.format.header_data_from_array_1_0(np.empty((0,), dtype))
    text = repr({"descr": d["descr"], "fortran_order": False, "shape": tuple(shape)})
    body = len(text) + 1
    pad = NPY_HEADER_BYTES - 10 - body
    if pad < 0:
        raise ValueError(f"shape {shape} does not fit a {NPY_HEADER_BYTES}-byte .npy header")
    magic = b"\x93NUMPY\x01\x00" + (NPY_HEADER_BYTES - 10).to_bytes(2, "little")
    return magic + (text + " " * pad + "\n").encode("latin1")


class NpyWriter:
    """Streams samples of one shape into a .npy file; the sample count is written on close.

    Memory stays at one sample whatever the number of samples. An OSError (disk full...) names
    the file; call abort() to remove it."""

    def __init__(self, path: Path, dtype: str | np.dtype[Any], sample_shape: tuple[int, ...]):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.sample_shape = tuple(sample_shape)
        self.length = 0
        try:
            self._f: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by close() or abort()
        except OSError as e:
            raise named(e, path) from e
        self._write(b"\0" * NPY_HEADER_BYTES)

    def _write(self, data: Any) -> None:
        try:
            self._f.write(data)
        except OSError as e:
            raise named(e, self.path) from e

    def append(self, sample: np.ndarray) -> None:
        if sample.shape != self.sample_shape or sample.dtype != self.dtype:
            raise ValueError(
                f"{self.path.name}: sample {sample.dtype}{sample.shape} is not "
                f"{self.dtype}{self.sample_shape}"
            )
        self._write(np.ascontiguousarray(sample).data)
        self.length += 1

    def extend(self, samples: np.ndarray) -> None:
        """Append many samples (first axis) in one write, e.g. a run of tokens."""
        if samples.shape[1:] != self.sample_shape or samples.dtype != self.dtype:
            raise ValueError(f"{self.path.name}: {samples.dtype}{samples.shape[1:]} mismatch")
        self._write(np.ascontiguousarray(samples).data)
        self.length += len(samples)

    def close(self) -> None:
        try:
            self._f.seek(0)
            self._f.write(npy_header(self.dtype, (self.length, *self.sample_shape)))
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
        except OSError as e:
            raise named(e, self.path) from e

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # flushing may fail again (disk full): it goes anyway
            self._f.close()
        self.path.unlink(missing_ok=True)


def smallest_uint(max_value: int) -> str:
    """The narrowest unsigned dtype holding 0..max_value; 256 classes fit uint8, 257 do not.

    >>> smallest_uint(255), smallest_uint(256), smallest_uint(65535), smallest_uint(65536)
    ('uint8', 'uint16', 'uint16', 'uint32')
    """
    for dt in ("uint8", "uint16", "uint32", "uint64"):
        if max_value <= np.iinfo(dt).max:
            return dt
    raise ValueError(f"{max_value} does not fit uint64")


# ---------------------------------------------------------------- reading


def safe_path(root: Path, rel: str) -> Path:
    """`root/rel`, refusing manifest paths that escape the dataset folder: absolute paths, `..`,
    and links that resolve outside it."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise FormatError(f"manifest path {rel!r} is not a file name")
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts:
        raise FormatError(f"manifest path {rel!r} escapes the dataset folder {root}")
    full = root / p
    try:
        inside = full.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError) as e:  # a link loop
        raise FormatError(f"{full} cannot be resolved ({e})") from e
    if not inside:
        raise FormatError(f"{full} links outside the dataset folder {root}")
    return full


def read_manifest(root: str | os.PathLike[str], expect_sha256: str | None = None) -> Manifest:
    """The manifest of a dataset folder (not checked against the files: see load_manifest).

    `expect_sha256`: refuse a manifest that is not that file any more (the folder was
    repacked while a dataset object made from the old one was in use)."""
    root = Path(root)
    path = root / MANIFEST
    if not path.is_file():
        if (root.parent / (root.name + ".partial")).exists():
            hint = f"an unfinished run is in {root.name}.partial: rerun prep with --resume"
        else:
            hint = "pack it with `prep pack SRC OUT`"
        raise FormatError(f"{root} has no {MANIFEST}. HINT: {hint}")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise FormatError(f"{path}: {e}") from e
    if expect_sha256 is not None and hashlib.sha256(data).hexdigest() != expect_sha256:
        raise FormatError(
            f"{path} changed since the dataset was opened (repacked with --overwrite?). "
            "HINT: make the dataset object again, and restart the DataLoader's workers"
        )
    try:
        d = json.loads(data.decode("utf-8"))
        if not isinstance(d, dict):
            raise TypeError(f"a JSON {type(d).__name__}, not an object")
        return Manifest.from_dict(d)
    except FormatError as e:
        raise FormatError(f"{path}: {e}") from e
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # JSON and schema errors
        raise FormatError(f"{path} is malformed ({e!r}). HINT: repack the dataset") from e


def _h5_layout(path: Path, key: str) -> tuple[int, np.dtype[Any], tuple[int, ...]]:
    """Byte offset, dtype and shape of a contiguous, uncompressed HDF5 dataset."""
    import h5py  # only for .h5 datasets; the handle is closed before any worker forks

    with h5py.File(path, "r") as f:
        ds = f[key]
        if not isinstance(ds, h5py.Dataset):
            raise FormatError(f"{path}:{key} is not a dataset")
        if ds.dtype.hasobject:
            raise FormatError(f"{path}:{key} holds Python objects or strings, not numbers")
        offset = ds.id.get_offset()
        if offset is None or ds.chunks is not None or ds.compression is not None:
            if ds.size == 0:
                return 0, ds.dtype, ds.shape
            raise FormatError(f"{path}:{key} is chunked or compressed; it cannot be memory-mapped")
        return int(offset), ds.dtype, ds.shape


def _npy_layout(path: Path) -> tuple[int, np.dtype[Any], tuple[int, ...]]:
    """Byte offset, dtype and shape from the header: the header is parsed as a literal, never
    unpickled (numpy's allow_pickle=False reading)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise FormatError(f"{path} is .npy version {version}; prep reads 1.0 and 2.0")
        offset = f.tell()
    if fortran:
        raise FormatError(f"{path} is Fortran-ordered; prep writes C order only")
    return offset, dtype, tuple(shape)


def open_array(root: Path, ref: ArrayRef, spec: ArraySpec, name: str = "") -> np.ndarray:
    """A read-only memory map of one shard's array, checked against the manifest: a regular
    file, its header's dtype and shape, and enough bytes for them."""
    path = safe_path(root, ref.file)
    label = f"array {name or spec.field}"
    try:
        st = os.stat(path)  # never opens: a FIFO in place of a shard cannot block here
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"{path}: {label} is not a regular file")
        offset, dtype, shape = _h5_layout(path, ref.key) if ref.key else _npy_layout(path)
    except FormatError:
        raise
    except (OSError, ValueError, KeyError, TypeError, SyntaxError) as e:
        raise FormatError(f"{path}: cannot read {label} ({e})") from e
    expected = (ref.length, *spec.shape)
    if dtype.hasobject:
        raise FormatError(f"{path}: {label} holds Python objects; refusing to unpickle it")
    if np.dtype(dtype) != np.dtype(spec.dtype) or tuple(shape) != expected:
        raise FormatError(
            f"{path}: {label} is {dtype}{tuple(shape)}, manifest says "
            f"{spec.dtype}{expected}. HINT: the file was changed after packing; repack"
        )
    if ref.length == 0 or np.prod(shape) == 0:
        return np.empty(shape, dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if offset + nbytes > st.st_size:
        raise FormatError(
            f"{path}: {label} needs {offset + nbytes} bytes, the file has {st.st_size}. "
            "HINT: the file is truncated; repack"
        )
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape))


def check_files(root: Path, manifest: Manifest, checksums: bool = False) -> list[str]:
    """Problems found in the folder, one line each naming the shard and the file or array at
    fault (empty: all good).

    Always checks that every declared array has a file listed in its shard, presence, byte
    sizes, per-sample counts (image datasets), dtypes and shapes; `checksums` also recomputes
    sha256."""
    problems: list[str] = []
    for i, shard in enumerate(manifest.shards):
        found: list[str] = []
        for rel, info in shard.files.items():
            try:
                path = safe_path(root, rel)
            except FormatError as e:
                found.append(f"shard {i}: {e}")
                continue
            try:
                st = os.stat(path)
            except OSError:
                found.append(f"shard {i}: {path} is missing")
                continue
            if not stat.S_ISREG(st.st_mode):
                found.append(f"shard {i}: {path} is not a regular file")
            elif st.st_size != info.bytes:
                found.append(f"shard {i}: {path} is {st.st_size} bytes, manifest says {info.bytes}")
            elif checksums and sha256_file(path) != info.sha256:
                found.append(f"shard {i}: {path} checksum differs from the manifest")
        for name in sorted(set(manifest.arrays) - set(shard.arrays)):
            found.append(f"shard {i}: array {name} is declared in the manifest but has no file")
        for name, ref in shard.arrays.items():
            if name not in manifest.arrays:
                found.append(f"shard {i}: array {name} is not declared in the manifest")
            elif ref.file not in shard.files:
                found.append(f"shard {i}: array {name} is in {ref.file}, not among its files")
            elif manifest.kind == "images" and ref.length != shard.count:
                found.append(
                    f"shard {i}: array {name} has {ref.length} samples, the shard {shard.count}"
                )
        if not found:  # the files are there and whole: read their headers
            for name, ref in shard.arrays.items():
                try:
                    open_array(root, ref, manifest.arrays[name], name)
                except FormatError as e:
                    found.append(f"shard {i}: {e}")
        if not found and manifest.kind == "tokens":
            found += _check_offsets(root, manifest, i)
        problems += found
    return problems


def _check_offsets(root: Path, manifest: Manifest, i: int) -> list[str]:
    """A token shard's document offsets: count + 1 of them, from 0, never decreasing, up to
    the shard's token count (read whole: 8 bytes a document)."""
    shard = manifest.shards[i]
    refs = shard.arrays
    if "doc_offsets" not in refs or "tokens" not in refs:
        return [f"shard {i}: a token shard needs arrays tokens and doc_offsets"]
    spec = manifest.arrays["doc_offsets"]
    off = np.asarray(open_array(root, refs["doc_offsets"], spec, "doc_offsets")).reshape(-1)
    ok = (
        len(off) == shard.count + 1
        and off[0] == 0
        and off[-1] == refs["tokens"].length
        and bool(np.all(np.diff(off) >= 0))
    )
    return [] if ok else [f"shard {i}: doc_offsets do not run from 0 to its token count"]


def load_manifest(root: str | os.PathLike[str]) -> Manifest:
    """Read and validate a dataset folder; raise FormatError naming the first problems."""
    manifest = read_manifest(root)
    problems = check_files(Path(root), manifest)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise FormatError("; ".join(problems[:3]) + more + ". HINT: run `prep verify`, repack")
    return manifest


def iter_rejects(root: Path) -> Iterator[dict[str, Any]]:
    path = root / REJECTS
    if path.is_file():
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


class ShardStore:
    """What every dataset of `loaders` keeps of its folder: the manifest, validated once when
    the dataset is made, and the shard arrays, memory-mapped lazily once per process.

    Neither is pickled: a worker process reads the manifest again (checking that it is still the
    same file) and maps the arrays it needs itself, so the dataset pickles to a few KB."""

    def _open_store(self, root: str | os.PathLike[str], kind: str) -> Manifest:
        self.root = Path(root)
        manifest = load_manifest(self.root)
        if manifest.kind != kind:
            raise FormatError(f"{self.root} holds {manifest.kind}, not {kind}")
        self._manifest: Manifest | None = manifest
        self._manifest_sha256 = sha256_file(self.root / MANIFEST)
        self._maps: dict[tuple[int, str], np.ndarray] = {}
        return manifest

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:  # after unpickling in a worker
            self._manifest = read_manifest(self.root, self._manifest_sha256)
        return self._manifest

    def _map(self, shard: int, name: str) -> np.ndarray:
        """Array `name` of shard `shard` (its index in the manifest), mapped once per process.

        A plain ndarray view of the map: indexing the np.memmap subclass costs 5x more."""
        arr = self._maps.get((shard, name))
        if arr is None:
            m = self.manifest
            ref, spec = m.shards[shard].arrays[name], m.arrays[name]
            arr = self._maps[(shard, name)] = np.asarray(open_array(self.root, ref, spec, name))
        return arr

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_manifest"] = None
        state["_maps"] = {}
        return state
