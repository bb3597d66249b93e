"""The one shard writer: a shard task's samples streamed into one array file each (or one .h5
file a shard), under temp names, renamed once whole, with the shard's record.

A kind's task gives `write_shard` its inputs and a function that turns one input into one
sample (array name -> its value: fixed-shape, or flat for a ragged array), returns None to skip
it, or raises Reject. Memory holds one sample at a time whatever the shard size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from loaders.format import OFFSETS, ArrayRef, ArraySpec, Shard
from prep.run.files import NpyWriter, named, publish, temp_path, writing
from prep.run.inputs import Reject, reject_record
from prep.run.profile import stage
from prep.run.staging import write_record

T = TypeVar("T")


class RaggedWriter:
    """Streams samples of any length into a flat .npy and their count + 1 int64 offsets into
    another: sample i is data[off[i]:off[i + 1]]."""

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


def write_shard(
    index: int,
    items: Sequence[T],
    encode: Callable[[T], dict[str, np.ndarray] | None],
    rel: Callable[[T], str],
    specs: dict[str, ArraySpec],
    storage: str,
    staging: Path,
) -> dict[str, Any]:
    """Encode `items` into shard `index` of `specs`' arrays under `staging` (`storage` npy or
    h5); return its record (the shard, and a reject record a refused input, named by `rel`).
    A failed write leaves no file of the shard behind."""
    stem = f"{index:05d}"
    # Temp names are per process and host: a worker the dead parent left running cannot write
    # into the files of the --resume run redoing the same shard (both would write the same bytes).
    parts = [(n, n + OFFSETS) if s.ragged else (n,) for n, s in specs.items()]
    tmp = {p: temp_path(staging / part_file(p, stem)) for group in parts for p in group}
    with stage("write"):
        writers = {name: _writer(name, s, tmp) for name, s in specs.items()}
    rejects: list[dict[str, Any]] = []
    count = 0
    with writing(writers.values()):
        for item in items:
            try:
                sample = encode(item)
            except Reject as r:
                rejects.append(reject_record(rel(item), r.code, r.message))
                continue
            if sample is None:  # skipped by the user's function: neither a sample nor a reject
                continue
            count += 1
            with stage("write"):
                for name, w in writers.items():
                    w.append(sample[name])
    if storage == "h5":
        renames, arrays = _as_h5(stem, tmp, writers, count, staging)
    else:
        renames = {path: part_file(part, stem) for part, path in tmp.items()}
        arrays = {
            name: _ref(name, w, count, (part_file(name, stem), part_file(name + OFFSETS, stem)))
            for name, w in writers.items()
        }
    files = {final: publish(src, staging / final) for src, final in renames.items()}
    record = {"index": index, "shard": asdict(Shard(count, arrays, files)), "rejects": rejects}
    with stage("write"):
        write_record(staging, index, record)
    return record


def _as_h5(
    stem: str, tmp: dict[str, Path], writers: dict[str, Any], count: int, staging: Path
) -> tuple[dict[Path, str], dict[str, ArrayRef]]:
    """The shard's temp .npy arrays copied into one temp .h5 file (removed once copied)."""
    final = f"shard-{stem}.h5"
    h5tmp = temp_path(staging / final)
    try:
        with stage("write"):
            _write_h5(h5tmp, tmp)
    except BaseException as e:
        for p in (h5tmp, *tmp.values()):
            p.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise named(e, h5tmp) from e
        raise
    for p in tmp.values():
        p.unlink()
    arrays = {name: _ref(name, w, count, (final, final), True) for name, w in writers.items()}
    return {h5tmp: final}, arrays


def _write_h5(path: Path, parts: dict[str, Path]) -> None:
    """Copy the shard's temp .npy arrays into one contiguous, uncompressed HDF5 file."""
    import h5py

    with h5py.File(path, "w") as f:
        for name, npy in parts.items():
            src = np.load(npy, mmap_mode="r", allow_pickle=False)
            ds = f.create_dataset(name, shape=src.shape, dtype=src.dtype, track_times=False)
            step = max(1, (64 << 20) // max(1, src[:1].nbytes))  # 64 MB at a time
            for start in range(0, len(src), step):
                ds[start : start + step] = src[start : start + step]
        f.flush()
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


def part_file(part: str, stem: str) -> str:
    """image_256-00000.npy; a ragged array's offsets: image_256-offsets-00000.npy."""
    if part.endswith(OFFSETS):
        return f"{part.removesuffix(OFFSETS)}-offsets-{stem}.npy"
    return f"{part}-{stem}.npy"


def _writer(name: str, spec: ArraySpec, tmp: dict[str, Path]) -> NpyWriter | RaggedWriter:
    if spec.ragged:
        return RaggedWriter(tmp[name], tmp[name + OFFSETS], spec.dtype)
    return NpyWriter(tmp[name], spec.dtype, spec.shape)


def _ref(
    name: str, w: NpyWriter | RaggedWriter, count: int, files: tuple[str, str], h5: bool = False
) -> ArrayRef:
    """A shard's array in `files` (its data's, its offsets'): `count` samples, or (ragged) its
    data's length and count + 1 offsets. In an .h5 file both are datasets, keyed by name."""
    key = name if h5 else None
    if not isinstance(w, RaggedWriter):
        return ArrayRef(files[0], count, key)
    offsets = ArrayRef(files[1], count + 1, name + OFFSETS if h5 else None)
    return ArrayRef(files[0], w.length, key, offsets)
