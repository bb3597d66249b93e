"""The one shard writer: a shard's named arrays streamed into one file each (or one .h5 file a
shard), under temp names, renamed once whole, with the shard's record.

`ShardFiles` is the file side every kind shares: arrays opened to temp names, written, then
closed and published together as the shard's `{files, arrays}`, or aborted leaving no file.
A kind keeps its own batching (a batch of documents, a block of table rows, one volume).

`write_shard` is the sample loop on top of it: a kind's task gives it its inputs and a
function that turns one input into one sample (array name -> its value: fixed-shape, or flat
for a ragged array) or a list of them (a long video or recording cut into several), returns
None to skip it, or raises Reject. Memory holds one input's samples at a time whatever the
shard size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from loaders.format import OFFSETS, ArrayRef, ArraySpec, Shard
from loaders.format.index import file_name, stem
from prep.run.files import NpyWriter, RaggedWriter, named, publish, temp_path, writing
from prep.run.inputs import Reject, reject_record
from prep.run.profile import stage
from prep.run.staging import write_record

T = TypeVar("T")


def part_file(part: str, shard_stem: str) -> str:
    """image_256-00000.npy; a ragged array's offsets: image_256-offsets-00000.npy (the names
    loaders.format.index derives).

    >>> part_file("tokens", "train-00003"), part_file("source" + OFFSETS, "train-00003")
    ('tokens-train-00003.npy', 'source-offsets-train-00003.npy')
    """
    return file_name(part, shard_stem, "npy")


class ShardFiles:
    """One shard's arrays under `staging`, each in `part_file(name, stem)` once published.

    An array is fixed-shape (one sample a row; shape () and extend() for a flat one) or ragged
    (flat data and count + 1 int64 offsets, part of its ref: `NAME.offsets`). Temp names are
    per process and host: a worker that a dead parent left running cannot write into the files
    of the --resume run redoing the same shard. Use inside `writing([...])`, which closes it, or
    aborts it on failure."""

    def __init__(self, staging: Path, stem: str):
        self.staging, self.stem = staging, stem
        self.writers: dict[str, NpyWriter | RaggedWriter] = {}
        self.parts: dict[str, Path] = {}  # file part (array, offsets) -> its temp file

    def _temp(self, part: str) -> Path:
        if part in self.parts:
            raise ValueError(f"{part}: opened twice in shard {self.stem}")
        self.parts[part] = temp_path(self.staging / part_file(part, self.stem))
        return self.parts[part]

    def array(
        self, name: str, dtype: str | np.dtype[Any], shape: tuple[int, ...] = ()
    ) -> NpyWriter:
        w = self.writers[name] = NpyWriter(self._temp(name), dtype, shape)
        return w

    def ragged(self, name: str, dtype: str | np.dtype[Any]) -> RaggedWriter:
        """A ragged array: its data, and its offsets (`NAME.offsets`)."""
        data, off = self._temp(name), self._temp(name + OFFSETS)
        w = self.writers[name] = RaggedWriter(data, off, dtype)
        return w

    def open_all(self, specs: dict[str, ArraySpec]) -> None:
        for name, s in specs.items():
            if s.ragged:
                self.ragged(name, s.dtype)
            else:
                self.array(name, s.dtype, s.shape)

    def append(self, sample: dict[str, np.ndarray]) -> None:
        """One sample of every array: fixed-shape, or a ragged array's values (any shape)."""
        for name, w in self.writers.items():
            w.append(sample[name])

    def extend(self, block: dict[str, np.ndarray]) -> None:
        """Many samples of every array (their first axis): a block of table rows."""
        for name, w in self.writers.items():
            if isinstance(w, RaggedWriter):
                raise TypeError(f"{name} is ragged: append() its samples one at a time")
            w.extend(block[name])

    def close(self) -> None:
        for w in self.writers.values():
            w.close()

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()

    def publish(self, count: int, split: str | None = None, h5: bool = False) -> Shard:
        """After close(): the files under their final names, a shard of `count` samples.
        h5: the arrays copied into one `shard-STEM.h5` first, keyed by part name."""
        h5_file = f"shard-{self.stem}.h5" if h5 else None
        if h5_file is not None:
            renames = {self._as_h5(h5_file): h5_file}
        else:
            renames = {path: part_file(part, self.stem) for part, path in self.parts.items()}
        files = {name: publish(tmp, self.staging / name) for tmp, name in renames.items()}
        return Shard(count, self._refs(h5_file), files, split)

    def _refs(self, h5: str | None) -> dict[str, ArrayRef]:
        """Each array's ref: its file (the .h5's dataset) and length; a ragged one's offsets
        nested in it."""

        def ref(part: str, length: int) -> ArrayRef:
            return (
                ArrayRef(h5, length, part) if h5 else ArrayRef(part_file(part, self.stem), length)
            )

        refs: dict[str, ArrayRef] = {}
        for name, w in self.writers.items():
            refs[name] = ref(name, w.length)
            if isinstance(w, RaggedWriter):
                refs[name].offsets = ref(name + OFFSETS, w.offsets.length)
        return refs

    def _as_h5(self, final: str) -> Path:
        """The temp .npy parts copied into one temp .h5 file (the parts removed once copied)."""
        h5tmp = temp_path(self.staging / final)
        try:
            with stage("write"):
                _write_h5(h5tmp, self.parts)
        except BaseException as e:
            for p in (h5tmp, *self.parts.values()):
                p.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise named(e, h5tmp) from e
            raise
        for p in self.parts.values():
            p.unlink()
        return h5tmp


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


def write_shard(
    index: int,
    items: Sequence[T],
    encode: Callable[[T], dict[str, np.ndarray] | list[dict[str, np.ndarray]] | None],
    rel: Callable[[T], str],
    specs: dict[str, ArraySpec],
    storage: str,
    staging: Path,
    finish: Callable[[dict[str, Any]], None] | None = None,
    split: str | None = None,
) -> dict[str, Any]:
    """Encode `items` into shard `index` of `specs`' arrays under `staging` (`storage` npy or
    h5), of `split` (its file names say it); return its record (the shard, and a reject record
    a refused input, named by `rel`). `finish` adds what a kind keeps beside (pixel sums)
    before the record is written: what --resume reads back. A failed write leaves no file of
    the shard behind."""
    out = ShardFiles(staging, stem(split, index))
    rejects: list[dict[str, Any]] = []
    count = 0
    with writing([out]):
        with stage("write"):
            out.open_all(specs)
        for item in items:
            try:
                sample = encode(item)
            except Reject as r:
                rejects.append(reject_record(rel(item), r.code, r.message))
                continue
            if sample is None:  # skipped by the user's function: neither a sample nor a reject
                continue
            for one in sample if isinstance(sample, list) else [sample]:
                count += 1
                with stage("write"):
                    out.append(one)
    shard = out.publish(count, split, h5=storage == "h5")
    record = {"index": index, "shard": asdict(shard), "rejects": rejects}
    if finish is not None:
        finish(record)
    with stage("write"):
        write_record(staging, index, record)
    return record
