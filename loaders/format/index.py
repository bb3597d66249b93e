"""The version 4 shard index (docs/format.md, "The shard index"): each shard a row of two .npy
files, `shards.npy` (counts, split, task, lengths, byte sizes) and `sha256.npy`, its file names
derived from the row.

>>> file_name("image_64", stem(None, 3), "npy"), file_name("tokens.offsets", stem("val", 1), "npy")
('image_64-00003.npy', 'tokens-offsets-val-00001.npy')
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from tokenize import TokenError
from typing import Any, overload

import numpy as np

from loaders.format.spec import (
    OFFSETS,
    ArrayRef,
    ArraySpec,
    FileInfo,
    FormatError,
    Shard,
    count,
    is_sha256,
)

Resolve = Callable[[str, FileInfo], Path]  # an index file's name and record -> a local path
SHARDS, DIGESTS = "shards.npy", "sha256.npy"
FIXED = ("count", "split", "task")
H5_PART = "shard"  # an .h5 dataset's one file a shard


def stem(split: str | None, task: int) -> str:
    """The shard's part of its file names."""
    return f"{task:05d}" if split is None else f"{split}-{task:05d}"


def file_name(part: str, shard_stem: str, storage: str) -> str:
    """The file holding `part` (an array, or `ARRAY.offsets`) of the shard named `shard_stem`."""
    if storage == "h5":
        return f"{H5_PART}-{shard_stem}.h5"
    if part.endswith(OFFSETS):
        return f"{part.removesuffix(OFFSETS)}-offsets-{shard_stem}.npy"
    return f"{part}-{shard_stem}.npy"


def parts(arrays: Mapping[str, ArraySpec], storage: str) -> list[str]:
    """A shard's files, in index order: each array and a ragged one's offsets, or the .h5 file."""
    if storage == "h5":
        return [H5_PART]
    return [p for name in sorted(arrays) for p in (name, name + OFFSETS)[: 1 + arrays[name].ragged]]


def columns(arrays: Mapping[str, ArraySpec], storage: str) -> list[str]:
    lengths = [f"length:{name}" for name in sorted(arrays)]
    return [*FIXED, *lengths, *(f"bytes:{p}" for p in parts(arrays, storage))]


def shard_of(
    arrays: Mapping[str, ArraySpec],
    storage: str,
    split: str | None,
    task: int,
    count: int,
    lengths: Sequence[int],
    sizes: Sequence[int],
    digests: Sequence[str],
) -> Shard:
    """A shard's record from its index row (`lengths` by name, `sizes`, `digests` by `parts`)."""
    st = stem(split, task)
    refs = {}
    for name, length in zip(sorted(arrays), lengths, strict=True):
        spec = arrays[name]
        key = name if storage == "h5" else None
        ref = ArrayRef(file_name(name, st, storage), length, key)
        if spec.ragged:
            off = name + OFFSETS
            ref.offsets = ArrayRef(file_name(off, st, storage), count + 1, off if key else None)
        refs[name] = ref
    names = [file_name(p, st, storage) for p in parts(arrays, storage)]
    files = {n: FileInfo(b, d) for n, b, d in zip(names, sizes, digests, strict=True)}
    return Shard(count, refs, files, split)


def index_arrays(
    shards: Sequence[Shard], arrays: Mapping[str, ArraySpec], storage: str, splits: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """`shards.npy`'s and `sha256.npy`'s arrays of a run's records (ValueError: misnamed files)."""
    ps = parts(arrays, storage)
    table = np.empty((len(columns(arrays, storage)), len(shards)), np.int64)
    sha = np.empty((len(shards), len(ps), 32), np.uint8)
    first = min(arrays)  # the task number is in the first array's file name
    prefix = f"{H5_PART}-" if storage == "h5" else f"{first}-"
    for i, s in enumerate(shards):
        file = s.arrays[first].file
        digits = file.removeprefix(prefix).rsplit(".", 1)[0].rsplit("-", 1)[-1]
        if not file.startswith(prefix) or not digits.isdigit():
            raise ValueError(f"{file}: not a shard file named by the rule")
        task = int(digits)
        lengths = [s.arrays[name].length for name in sorted(arrays)]
        again = shard_of(
            arrays, storage, s.split, task, s.count, lengths, [0] * len(ps), [""] * len(ps)
        )
        named = [{n: (r.file, r.key) for n, r in x.arrays.items()} for x in (again, s)]
        if named[0] != named[1] or set(again.files) != set(s.files):
            raise ValueError(
                f"shard {i}: its files are not named {stem(s.split, task)} by the rule"
            )
        infos = [s.files[n] for n in again.files]
        code = splits.index(s.split) if s.split is not None else -1
        table[:, i] = [s.count, code, task, *lengths, *(f.bytes for f in infos)]
        sha[i] = [np.frombuffer(bytes.fromhex(f.sha256), np.uint8) for f in infos]
    return table, sha


MADE = 4096  # shards a ShardIndex keeps once made


class ShardIndex(Sequence[Shard]):
    """A dataset's shards, each made from its index row when asked for (`counts`: a column)."""

    def __init__(
        self,
        table: np.ndarray,
        sha: np.ndarray,
        arrays: Mapping[str, ArraySpec],
        storage: str,
        splits: Sequence[str],
    ):
        self.table, self.sha, self.arrays = table, sha, dict(arrays)
        self.storage, self.splits = storage, list(splits)
        self.counts, self.split_codes = table[0], table[1]
        self._lengths = slice(len(FIXED), len(FIXED) + len(arrays))
        self._sizes = slice(self._lengths.stop, None)
        self._made: dict[int, Shard] = {}  # the shards asked for, up to MADE: read per file

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_made": {}}

    def __len__(self) -> int:
        return self.table.shape[1]

    @overload
    def __getitem__(self, i: int) -> Shard: ...

    @overload
    def __getitem__(self, i: slice) -> list[Shard]: ...

    def __getitem__(self, i: int | slice) -> Shard | list[Shard]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(f"shard {i} of {len(self)}")
        i %= len(self)
        if i in self._made:
            return self._made[i]
        row = self.table[:, i].tolist()
        count, code, task = row[: len(FIXED)]
        lengths, sizes = row[self._lengths], row[self._sizes]
        if min(count, task, *lengths, *sizes) < 0 or not -1 <= code < len(self.splits):
            raise FormatError(f"shard {i}: its index row {row[:8]} holds a negative number")
        digests = [bytes(d).hex() for d in self.sha[i]]
        split = self.splits[code] if code >= 0 else None
        shard = shard_of(self.arrays, self.storage, split, task, count, lengths, sizes, digests)
        if len(self._made) < MADE:
            self._made[i] = shard
        return shard


def open_index(
    entry: Any,
    arrays: Mapping[str, ArraySpec],
    storage: str,
    splits: Sequence[str],
    resolve: Resolve | None,
) -> ShardIndex:
    """The shard index of the manifest's `index` entry, each file an .npy of the size, dtype and
    shape the entry implies."""
    if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict):
        raise FormatError(f"index {str(entry)[:40]} is not an object naming its files")
    n = entry.get("shards")
    if not count(n):
        raise FormatError(f"index: shards {n!r:.20} is not a number of shards")
    if entry.get("columns") != columns(arrays, storage):
        raise FormatError("index: its columns are not the arrays' (a manifest edited by hand?)")
    if set(entry["files"]) != {SHARDS, DIGESTS}:
        raise FormatError(f"index: files {sorted(entry['files'])[:3]} are not {SHARDS}, {DIGESTS}")
    if resolve is None:
        raise FormatError("its shard index is beside it: open the dataset's folder")
    ncols = len(entry["columns"])
    want = {SHARDS: ("int64", (ncols, n)), DIGESTS: ("uint8", (n, len(parts(arrays, storage)), 32))}
    got = {}
    for name, (dtype, shape) in want.items():
        info = entry["files"][name]
        ok = isinstance(info, dict) and count(info.get("bytes")) and is_sha256(info.get("sha256"))
        if not ok:
            raise FormatError(f"index: file {name} has a bad byte size or sha256")
        path = resolve(name, FileInfo(info["bytes"], info["sha256"]))
        got[name] = _map(path, name, info["bytes"], dtype, shape)
    table, codes = got[SHARDS], got[SHARDS][1]  # codes: each shard's split, -1 for none
    if n and (table[[0, 2]].min() < 0 or not -1 <= codes.min() <= codes.max() < len(splits)):
        raise FormatError(f"index: a shard's count, task or split in {SHARDS} is out of range")
    if n > 1 and _repeats(table[1:3]):  # one stem: its files read twice
        raise FormatError(f"index: two shards in {SHARDS} have one split and task")
    return ShardIndex(table, got[DIGESTS], arrays, storage, splits)


def _repeats(pairs: np.ndarray) -> bool:
    """Whether two columns of (2, n) `pairs` are equal: sorted, as np.unique(axis=1) would, which
    imports numpy.ma (10 ms of a one-image pack)."""
    s = pairs[:, np.lexsort(pairs[::-1])]
    return bool((s[:, 1:] == s[:, :-1]).all(axis=0).any())


def _map(path: Path, name: str, size: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A read-only map of index file `name` at `path`, refused unless exactly what it should be."""
    said = str(path) if path.name == name else f"{name} ({path})"
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise FormatError(f"{said} is not a regular file of {size} bytes. HINT: repack")
        arr = np.lib.format.open_memmap(path, mode="r")  # an .npy only (np.load takes zips)
    except FormatError:
        raise
    # numpy parses a header as a Python literal: tokenize and ast errors for a mangled one
    except (OSError, ValueError, OverflowError, SyntaxError, TokenError, RecursionError) as e:
        raise FormatError(f"{said} cannot be read as the shard index ({e}). HINT: repack") from e
    if arr.dtype != np.dtype(dtype) or arr.shape != shape or not arr.flags.c_contiguous:
        raise FormatError(f"{said} is {arr.dtype}{arr.shape}, the manifest says {dtype}{shape}")
    return arr


def index_entry(
    table: np.ndarray, arrays: Mapping[str, ArraySpec], storage: str, files: dict[str, Any]
) -> dict[str, Any]:
    """The manifest's `index` entry for an index written as `files` (name -> bytes, sha256)."""
    return {"shards": table.shape[1], "columns": columns(arrays, storage), "files": files}
