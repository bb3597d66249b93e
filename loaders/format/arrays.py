"""Reading a dataset folder: safe paths, the manifest, memory maps checked against it."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format.schema import (
    MANIFEST,
    REJECTS,
    ArrayRef,
    ArraySpec,
    FormatError,
    Manifest,
)


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
            elif checksums and _sha256(path) != info.sha256:
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


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
