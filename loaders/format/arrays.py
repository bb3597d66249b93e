"""Reading a dataset folder: safe paths, the manifest, memory maps checked against it, and
rejects.jsonl read back (the report, tests)."""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import json
import math
import mmap
import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from tokenize import TokenError
from typing import Any, cast

import numpy as np

from loaders.format.chunks import Chunked, ZstdLayout, zstd_layout
from loaders.format.schema import (
    MANIFEST,
    NPY_HEADER_BYTES,
    REJECTS,
    ArrayRef,
    ArraySpec,
    FormatError,
    Manifest,
    Resolve,
)

Layout = tuple[int, np.dtype[Any], tuple[int, ...]]  # byte offset, dtype, shape
Arrays = dict[str, tuple[Path, Layout]]  # a shard's arrays: name -> file, checked layout


def safe_path(root: Path, rel: str) -> Path:
    """`root/rel`, refusing paths that leave the folder: absolute, `..`, links out of it."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise FormatError(f"manifest path {rel!r} is not a file name")
    if "/" not in rel and rel not in (".", ".."):  # an entry of root itself (one lstat)
        full = root / rel
        if not os.path.islink(full):
            return full
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


def read_manifest_file(root: Path) -> tuple[bytes, os.stat_result]:
    """The bytes of `root`'s manifest and their file's stat (one open: a rename cannot mix two)."""
    path = root / MANIFEST
    try:  # O_NONBLOCK: a FIFO in place of the manifest cannot block the open
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise FormatError(f"{path} is not a regular file. HINT: repack the dataset")
            return f.read(), st
    except FileNotFoundError:
        if (root.parent / (root.name + ".partial")).exists():
            hint = f"an unfinished run is in {root.name}.partial: rerun prep with --resume"
        else:
            hint = "pack it with `prep pack SRC OUT`"
        raise FormatError(f"{root} has no {MANIFEST}. HINT: {hint}") from None
    except OSError as e:
        raise FormatError(f"{path}: {e}. HINT: check that the folder is readable") from e


def read_manifest(root: str | os.PathLike[str]) -> Manifest:
    """The manifest of a dataset folder (not checked against the files: see load_manifest)."""
    root = Path(root)
    return Manifest.from_json(read_manifest_file(root)[0], root / MANIFEST, local_resolver(root))


def local_resolver(root: Path) -> Resolve:
    """A folder's shard index files, refused where they leave it (safe_path)."""
    return lambda name, info: safe_path(root, name)


def _h5_layout(path: Path, key: str) -> Layout:
    """Byte offset, dtype and shape of a contiguous, uncompressed HDF5 dataset."""
    import h5py  # only for .h5 datasets; the handle is closed before any worker forks

    try:
        with h5py.File(path, "r") as f:
            ds = _h5_dataset(f, path, key)
            if ds.external or ds.is_virtual:  # its bytes live in other files
                raise FormatError(f"{path}:{key} keeps its data in other files. HINT: repack")
            if ds.shape is None:  # an empty dataspace (h5py.Empty): no array at all
                raise FormatError(f"{path}:{key} holds no array")
            if ds.dtype.hasobject:
                raise FormatError(f"{path}:{key} holds Python objects or strings, not numbers")
            offset = ds.id.get_offset()
            if offset is not None and ds.chunks is None and ds.compression is None:
                return int(offset), ds.dtype, ds.shape
            if ds.size == 0:
                return 0, ds.dtype, ds.shape
    except RuntimeError as e:  # h5py's error for a structure that points nowhere
        raise FormatError(f"{path}:{key} cannot be read ({e}). HINT: repack") from e
    raise FormatError(f"{path}:{key} is chunked or compressed; it cannot be memory-mapped")


def _h5_dataset(f: Any, path: Path, key: str) -> Any:
    """Dataset `key` of h5py.File `f` through hard links only (others map other offsets)."""
    import h5py

    node = f
    for part in (p for p in key.split("/") if p):
        link = node.get(part, getlink=True)
        if link is None:
            raise FormatError(f"{path}:{key} is missing. HINT: the file was changed; repack")
        if not isinstance(link, h5py.HardLink):
            raise FormatError(
                f"{path}:{key} is reached through a {type(link).__name__} (a link); prep "
                "writes datasets of the file itself. HINT: repack"
            )
        node = node[part]
    if not isinstance(node, h5py.Dataset):
        raise FormatError(f"{path}:{key} is not a dataset")
    return node


# Per .npy version: its header's length field, and numpy's reader of the header (a literal).
_NPY = {
    (1, 0): ("<H", np.lib.format.read_array_header_1_0),
    (2, 0): ("<I", np.lib.format.read_array_header_2_0),
}


def _npy_layout(path: Path) -> Layout:
    """Byte offset, dtype and shape from the header (a literal, never unpickled)."""
    with open(path, "rb", buffering=0) as f:
        head = f.read(NPY_HEADER_BYTES)
        if len(head) < 8 or head[:6] != b"\x93NUMPY":
            raise ValueError("not a .npy file: no magic string")  # check_array names it
        version = head[6], head[7]
        if version not in _NPY:
            raise FormatError(f"{path} is .npy version {version}; prep reads 1.0 and 2.0")
        start = 8 + struct.calcsize(_NPY[version][0])
        if len(head) < start:
            raise FormatError(f"{path} ends inside its .npy header. HINT: repack")
        (n,) = struct.unpack_from(_NPY[version][0], head, 8)
        if len(head) < start + n:
            head += f.read(start + n - len(head))
    # A text cut short: numpy's reader raises ValueError (check_array names the file)
    shape, fortran, dtype = _npy_header(version, head[8 : start + n])
    if fortran:
        raise FormatError(f"{path} is Fortran-ordered; prep writes C order only")
    return start + n, dtype, shape


@functools.lru_cache(maxsize=1024)
def _npy_header(version: tuple[int, int], raw: bytes) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, Fortran order, dtype) of a .npy header; cached: shards mostly share one."""
    shape, fortran, dtype = _NPY[version][1](io.BytesIO(raw))
    return tuple(shape), bool(fortran), dtype


def check_array(
    path: Path, ref: ArrayRef, spec: ArraySpec, name: str = "", size: int | None = None
) -> Layout:
    """Where the array lies in its file, checked against the manifest; `size`: None stats it."""
    label = f"array {name or spec.field}"
    try:
        if size is None:
            st = os.stat(path)  # never opens: a FIFO in place of a shard cannot block here
            if not stat.S_ISREG(st.st_mode):
                raise FormatError(f"{path}: {label} is not a regular file")
            size = st.st_size
        offset, dtype, shape = _h5_layout(path, ref.key) if ref.key else _npy_layout(path)
    except FormatError:
        raise
    # numpy parses a header as a Python literal: tokenize and ast errors for a mangled one
    except (OSError, ValueError, KeyError, TypeError, SyntaxError, TokenError, RecursionError) as e:
        raise FormatError(f"{path}: cannot read {label} ({e})") from e
    expected = (ref.length,) if spec.ragged else (ref.length, *spec.shape)
    if spec.compress and not ref.key:  # a uint8 payload holding the frames (chunks.py)
        return _compressed(path, offset, dtype, shape, size, spec, expected, label)
    if dtype.hasobject:
        raise FormatError(f"{path}: {label} holds Python objects; refusing to unpickle it")
    if np.dtype(dtype) != np.dtype(spec.dtype) or tuple(shape) != expected:
        raise FormatError(
            f"{path}: {label} is {dtype}{tuple(shape)}, manifest says "
            f"{spec.dtype}{expected}. HINT: the file was changed after packing; repack"
        )
    nbytes = math.prod(int(n) for n in shape) * dtype.itemsize  # Python ints: never wraps
    if nbytes and offset + nbytes > size:
        raise FormatError(
            f"{path}: {label} needs {offset + nbytes} bytes, the file has {size}. "
            "HINT: the file is truncated; repack"
        )
    return offset, dtype, tuple(shape)


def _compressed(
    path: Path,
    offset: int,
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    size: int,
    spec: ArraySpec,
    expected: tuple[int, ...],
    label: str,
) -> Layout:
    if dtype != np.uint8 or len(shape) != 1 or offset + shape[0] > size:
        raise FormatError(
            f"{path}: {label} is zstd-compressed, so a uint8 array within its file; it is "
            f"{dtype}{tuple(shape)} at {offset} of {size} bytes. HINT: repack"
        )
    return zstd_layout(path, offset, shape[0], np.dtype(spec.dtype), expected, spec.chunk)


def map_layout(path: Path, layout: Layout) -> np.ndarray:
    """A read-only ndarray over a map of `path` as check_array found it (holds a descriptor);
    for a compressed array a Chunked, which numpy reads as one (indexing, np.take, asarray)."""
    if isinstance(layout, ZstdLayout):
        return cast(np.ndarray, Chunked(path, layout))
    offset, dtype, shape = layout
    if 0 in shape:
        return np.empty(shape, dtype)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mm, dtype, math.prod(shape), offset).reshape(shape)


def read_layout(path: Path, layout: Layout) -> np.ndarray:
    """The array read into memory (no map, no descriptor kept)."""
    if isinstance(layout, ZstdLayout):
        return np.asarray(Chunked(path, layout))
    offset, dtype, shape = layout
    count = math.prod(shape)
    if count * dtype.itemsize > 1 << 20:  # big: numpy reads it straight into the array
        return np.fromfile(path, dtype, count, offset=offset).reshape(shape)
    with open(path, "rb", buffering=0) as f:  # small (labels, offsets): one read, no numpy I/O
        f.seek(offset)
        data = f.read(count * dtype.itemsize)
    if len(data) < count * dtype.itemsize:
        raise FormatError(f"{path} ends before its {shape} array. HINT: repack")
    return np.frombuffer(data, dtype, count).reshape(shape)


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes (the manifest's `sha256`)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


MAX_LINE = 1 << 16  # bytes: a record is a path, a reason and a one-line message
MAX_BYTES = 256_000_000  # bytes read at most: about a million records
SHOWN = 5  # bad line numbers named


def record(line: bytes) -> dict[str, str] | None:
    """One line's reject record, or None where it is not one.

    >>> record(b'{"path": "a.png", "reason": "corrupt"}')
    {'path': 'a.png', 'reason': 'corrupt', 'message': ''}
    >>> record(b'[1, 2]') is None
    True
    """
    try:
        r = json.loads(line)
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError too), nested too deep
        return None
    if not isinstance(r, dict):
        return None
    got = {k: r.get(k, "" if k == "message" else None) for k in ("path", "reason", "message")}
    text = {k: v for k, v in got.items() if isinstance(v, str)}
    return text if len(text) == len(got) else None


def records(root: Path, problems: list[str]) -> Iterator[dict[str, str]]:
    """The reject records of `root` (untrusted: a regular file in the folder, a bounded read, each
    line checked); then `problems` holds a line on what was not read."""
    try:
        path = safe_path(root, REJECTS)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except (FormatError, OSError) as e:
        problems.append(f"{REJECTS} not read: {e}")
        return
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            problems.append(f"{REJECTS} not read: {path} is not a regular file")
            return
        bad: list[int] = []  # the first SHOWN bad line numbers
        done = count = 0
        for n in itertools.count(1):
            if done >= MAX_BYTES and f.peek(1):
                problems.append(f"{REJECTS}: only its first {MAX_BYTES / 1e6:,.0f} MB read")
                break
            line = f.readline(MAX_LINE + 1)
            if not line:
                break
            done += len(line)
            long = len(line) > MAX_LINE
            while long and line and not line.endswith(b"\n") and done < MAX_BYTES:
                # the rest of a line past MAX_LINE: skipped, never held
                line = f.readline(MAX_LINE)
                done += len(line)
            got = None if long else record(line)
            if got is not None:
                yield got
            elif long or line.strip():
                count += 1
                bad += [n] if len(bad) < SHOWN else []
    if count:
        shown = ", ".join(map(str, bad)) + (" ..." if count > SHOWN else "")
        lines = f"{count} lines of {REJECTS} are" if count > 1 else f"line {shown} of {REJECTS} is"
        problems.append(
            f"{lines} not reject records"
            + (f" (lines {shown})" if count > 1 else "")
            + "; the counts leave them out. HINT: prep writes one JSON object a line there"
        )


def iter_rejects(root: Path) -> Iterator[dict[str, str]]:
    """The reject records of a dataset (or run) folder; lines that are none are passed over."""
    yield from records(Path(root), [])
