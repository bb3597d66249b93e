"""Reading a dataset folder: safe paths, the manifest, memory maps checked against it."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import mmap
import os
import stat
import struct
from collections.abc import Callable, Iterator
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
    Shard,
)

Layout = tuple[int, np.dtype[Any], tuple[int, ...]]  # byte offset, dtype, shape


def safe_path(root: Path, rel: str) -> Path:
    """`root/rel`, refusing manifest paths that escape the dataset folder: absolute paths, `..`,
    and links that resolve outside it."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise FormatError(f"manifest path {rel!r} is not a file name")
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts:
        raise FormatError(f"manifest path {rel!r} escapes the dataset folder {root}")
    full = root / p
    if len(p.parts) == 1 and not full.is_symlink():  # an entry of root itself: inside it
        return full
    try:
        inside = full.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError) as e:  # a link loop
        raise FormatError(f"{full} cannot be resolved ({e})") from e
    if not inside:
        raise FormatError(f"{full} links outside the dataset folder {root}")
    return full


def read_manifest_file(root: Path) -> tuple[bytes, os.stat_result]:
    """The bytes of `root`'s manifest and the stat of the file they were read from: one open,
    so that a rename in between cannot pair one file's bytes with another's stat."""
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
    return Manifest.from_json(read_manifest_file(root)[0], root / MANIFEST)


def _h5_layout(path: Path, key: str) -> Layout:
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


# Per .npy version: its header's length field, and numpy's reader of the header (a literal).
_NPY = {
    (1, 0): ("<H", np.lib.format.read_array_header_1_0),
    (2, 0): ("<I", np.lib.format.read_array_header_2_0),
}


def _npy_layout(path: Path) -> Layout:
    """Byte offset, dtype and shape from the header: the header is parsed as a literal, never
    unpickled (numpy's allow_pickle=False reading)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version not in _NPY:
            raise FormatError(f"{path} is .npy version {version}; prep reads 1.0 and 2.0")
        length = f.read(struct.calcsize(_NPY[version][0]))
        (n,) = struct.unpack(_NPY[version][0], length)
        shape, fortran, dtype = _npy_header(version, length + f.read(n))
        offset = f.tell()
    if fortran:
        raise FormatError(f"{path} is Fortran-ordered; prep writes C order only")
    return offset, dtype, shape


@functools.lru_cache(maxsize=1024)
def _npy_header(version: tuple[int, int], raw: bytes) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, Fortran order, dtype) of a .npy header (its length field and text). Cached:
    the shards of a dataset mostly share one header, and parsing it costs 0.1 ms."""
    shape, fortran, dtype = _NPY[version][1](io.BytesIO(raw))
    return tuple(shape), bool(fortran), dtype


def check_array(path: Path, ref: ArrayRef, spec: ArraySpec, name: str = "") -> Layout:
    """Where the array lies in its file, checked against the manifest: a regular file, its
    header's dtype and shape, and enough bytes for them. Opens the file only to read the header."""
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
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes and offset + nbytes > st.st_size:
        raise FormatError(
            f"{path}: {label} needs {offset + nbytes} bytes, the file has {st.st_size}. "
            "HINT: the file is truncated; repack"
        )
    return offset, dtype, tuple(shape)


def map_array(path: Path, ref: ArrayRef, spec: ArraySpec, name: str = "") -> np.ndarray:
    """A read-only memory map of one shard's array in `path`, checked as check_array does."""
    return map_layout(path, check_array(path, ref, spec, name))


def map_layout(path: Path, layout: Layout) -> np.ndarray:
    """A read-only ndarray over a memory map of `path`, laid out as check_array found it. The
    map keeps a file descriptor (a dup) until it is garbage-collected: loaders.store bounds them."""
    offset, dtype, shape = layout
    if 0 in shape:
        return np.empty(shape, dtype)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mm, dtype, math.prod(shape), offset).reshape(shape)


def read_layout(path: Path, layout: Layout) -> np.ndarray:
    """The array read into memory (no map, no descriptor kept)."""
    offset, dtype, shape = layout
    return np.fromfile(path, dtype, math.prod(shape), offset=offset).reshape(shape)


def open_array(root: Path, ref: ArrayRef, spec: ArraySpec, name: str = "") -> np.ndarray:
    """map_array of the array's file in the folder `root`, refusing paths out of it."""
    return map_array(safe_path(root, ref.file), ref, spec, name)


def check_files(root: Path, manifest: Manifest, checksums: bool = False) -> list[str]:
    """Problems found in the folder, one line each naming the shard and the file or array at
    fault (empty: all good).

    Always checks that every declared array has a file listed in its shard, presence, byte
    sizes, dtypes and shapes, then the checks of the manifest's kind (SHARD_CHECKS); `checksums`
    also recomputes sha256."""
    problems: list[str] = []
    for i, shard in enumerate(manifest.shards):
        found = _file_problems(root, shard, checksums) + _array_problems(manifest, shard)
        layouts: dict[str, tuple[Path, Layout]] = {}
        if not found:  # the files are there and whole: read their headers
            for name, ref in shard.arrays.items():
                try:
                    path = safe_path(root, ref.file)
                    layouts[name] = path, check_array(path, ref, manifest.arrays[name], name)
                except FormatError as e:
                    found.append(str(e))
        if not found:
            found = SHARD_CHECKS[manifest.kind](manifest, shard, layouts)
        problems += [f"shard {i}: {p}" for p in found]
    return problems


def _file_problems(root: Path, shard: Shard, checksums: bool) -> list[str]:
    found = []
    for rel, info in shard.files.items():
        try:
            path = safe_path(root, rel)
            st = os.stat(path)
        except FormatError as e:
            found.append(str(e))
        except OSError:
            found.append(f"{root / rel} is missing")
        else:
            if not stat.S_ISREG(st.st_mode):
                found.append(f"{path} is not a regular file")
            elif st.st_size != info.bytes:
                found.append(f"{path} is {st.st_size} bytes, manifest says {info.bytes}")
            elif checksums and _sha256(path) != info.sha256:
                found.append(f"{path} checksum differs from the manifest")
    return found


def _array_problems(manifest: Manifest, shard: Shard) -> list[str]:
    found = [
        f"array {name} is declared in the manifest but has no file"
        for name in sorted(set(manifest.arrays) - set(shard.arrays))
    ]
    for name, ref in shard.arrays.items():
        if name not in manifest.arrays:
            found.append(f"array {name} is not declared in the manifest")
        elif ref.file not in shard.files:
            found.append(f"array {name} is in {ref.file}, not among its files")
    return found


Arrays = dict[str, tuple[Path, Layout]]  # a shard's arrays: name -> file, checked layout


def _check_images(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """Every array has the shard's count of samples; labels index `classes` (read whole: a
    few bytes a sample)."""
    found = [
        f"array {name} has {ref.length} samples, the shard {shard.count}"
        for name, ref in shard.arrays.items()
        if ref.length != shard.count
    ]
    if found or "label" not in arrays or manifest.classes is None or not shard.count:
        return found
    path, layout = arrays["label"]
    top, n = int(read_layout(path, layout).max()), len(manifest.classes)
    return [f"{path}: label {top} is not one of the {n} classes"] if top >= n else []


def _check_offsets(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """A token shard's document offsets: count + 1 of them, from 0, never decreasing, up to
    the shard's token count (read whole: 8 bytes a document)."""
    if "doc_offsets" not in arrays or "tokens" not in arrays:
        return ["a token shard needs arrays tokens and doc_offsets"]
    off = read_layout(*arrays["doc_offsets"]).reshape(-1)
    ok = (
        len(off) == shard.count + 1
        and off[0] == 0
        and off[-1] == shard.arrays["tokens"].length
        and bool(np.all(np.diff(off) >= 0))
    )
    return [] if ok else ["doc_offsets do not run from 0 to its token count"]


def _check_volumes(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """A volume shard: `count` shapes, `count + 1` voxel offsets from 0 that step by each
    volume's voxel count up to the voxels' length, labels as long as the voxels, and a
    foreground index inside its volumes (read whole: a few bytes a volume and indexed voxel)."""
    n, length = shard.count, {name: ref.length for name, ref in shard.arrays.items()}
    if "voxels" not in arrays or "volume_shape" not in arrays or "voxel_offsets" not in arrays:
        return ["a volume shard needs arrays voxels, volume_shape and voxel_offsets"]
    if length["volume_shape"] != n or length["voxel_offsets"] != n + 1:
        return [f"volume_shape and voxel_offsets do not hold {n} volumes"]
    sizes = np.prod(read_layout(*arrays["volume_shape"]).astype(np.int64), axis=1)
    off = read_layout(*arrays["voxel_offsets"])
    if off[0] != 0 or not np.array_equal(np.diff(off), sizes) or off[-1] != length["voxels"]:
        return ["voxel_offsets do not step by the volumes' sizes up to the voxel count"]
    if "label_voxels" in length and length["label_voxels"] != length["voxels"]:
        return ["label_voxels and voxels differ in length"]
    targets = [k for k in length if k.startswith("volume_target")]
    if any(length[k] != n for k in targets):  # one value per volume (a --targets column)
        return [f"a volume_target array does not hold {n} values"]
    if "fg_offsets" not in arrays or not n:
        return []
    bounds = read_layout(*arrays["fg_offsets"])
    fg = read_layout(*arrays["fg_voxels"])
    ok = length["fg_offsets"] == n and bool(np.all(np.diff(bounds, axis=1) >= 0))
    ok = ok and bounds[0, 0] == 0 and bounds[-1, -1] == len(fg)
    ok = ok and bool(np.all(bounds[1:, 0] == bounds[:-1, -1]))
    if not ok:
        return ["fg_offsets do not bound each volume's classes in fg_voxels"]
    tops = [int(fg[a:b].max()) for a, b in zip(bounds[:, 0], bounds[:, -1], strict=True) if b > a]
    used = [int(s) for s, a, b in zip(sizes, bounds[:, 0], bounds[:, -1], strict=True) if b > a]
    ok = all(t < s for t, s in zip(tops, used, strict=True))
    return [] if ok else ["fg_voxels hold a voxel outside its volume"]


# The checks of one shard that depend on the manifest's kind, run once its headers are good.
SHARD_CHECKS: dict[str, Callable[[Manifest, Shard, Arrays], list[str]]] = {
    "images": _check_images,
    "tokens": _check_offsets,
    "volumes": _check_volumes,
    "table": _check_images,  # every column has the shard's count of rows
}


def problems_error(problems: list[str]) -> FormatError:
    """One FormatError line for check_files' problems: the first three, and how many more."""
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return FormatError("; ".join(problems[:3]) + more + ". HINT: run `prep verify`, repack")


def load_manifest(root: str | os.PathLike[str]) -> Manifest:
    """Read and validate a dataset folder; raise FormatError naming the first problems."""
    manifest = read_manifest(root)
    problems = check_files(Path(root), manifest)
    if problems:
        raise problems_error(problems)
    return manifest


def iter_rejects(root: Path) -> Iterator[dict[str, Any]]:
    if (root / REJECTS).is_file():
        with open(root / REJECTS, encoding="utf-8") as f:
            yield from (json.loads(line) for line in f if line.strip())


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
