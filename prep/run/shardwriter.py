"""The shard writer: `ShardFiles` (a shard's arrays streamed to temp files, renamed once whole),
`write_shard` (the sample loop on it) and `shard_task` (a writer as a worker's task)."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from loaders.format import OFFSETS, ArrayRef, ArraySpec, Shard, sha256_file
from loaders.format.index import file_name, stem
from prep.run.errors import write_error
from prep.run.files import NpyWriter, RaggedWriter, named, publish, sync_all, temp_path
from prep.run.inputs import Reject, reject_record
from prep.run.parallel import core_lent
from prep.run.profile import stage
from prep.run.staging import write_record

T = TypeVar("T")

# docs/format.md, "Compressed arrays": what --compress zstd compresses (the roles JPEG does not
# hold), and about how many bytes a chunk decompresses to (a random read's cost).
COMPRESSED_ROLES = ("mask", "tokens", "text", "bytes", "json", "instances", "image", "voxels")
CHUNK_BYTES = 1 << 18
# The level where none is given: 3, and 13 for masks, whose runs of one class at 13 (btlazy2)
# become matches of the row before: 1.8x faster to decode than level 3's short repeats, half
# the size, and a mask compresses in about 0.3 ms (bench row 40d).
LEVELS = {"mask": 13, "instances": 13}


def compressed(
    specs: dict[str, ArraySpec], compress: str, level: int | None
) -> dict[str, ArraySpec]:
    """`specs` with each array --compress covers marked zstd, its chunk a whole number of rows,
    at `level` (None: its role's in LEVELS, or 3).

    >>> s = ArraySpec("mask", 64, "uint8", (64, 64), "raw", "mask")
    >>> got = compressed({"mask_64": s}, "zstd", None)["mask_64"]
    >>> got.chunk, got.level, compressed({"mask_64": s}, "zstd", 5)["mask_64"].level
    (64, 13, 5)
    """
    if compress == "none":
        return specs
    out = dict(specs)
    for name, s in specs.items():
        if s.role in COMPRESSED_ROLES and s.codec in ("raw", "ragged"):
            row = np.dtype(s.dtype).itemsize * (1 if s.ragged else math.prod(s.shape))
            rows = max(1, CHUNK_BYTES // max(1, row))
            chosen = LEVELS.get(s.role, 3) if level is None else level
            out[name] = replace(s, compress=compress, chunk=rows, level=chosen)
    return out


def write_zstd(src: Path, dst: Path, spec: ArraySpec) -> None:
    """The .npy at `src` as a compressed one at `dst`: uint8 of zstd frames of `spec.chunk`
    rows each, then count + 1 int64 frame starts (a frame is the same bytes for any --jobs)."""
    import zstandard

    data = np.load(src, mmap_mode="r", allow_pickle=False)
    zstd = zstandard.ZstdCompressor(level=spec.level, write_content_size=True, write_checksum=True)
    w = NpyWriter(dst, "uint8", ())
    try:
        starts = [0]
        for at in range(0, len(data), spec.chunk):
            frame = zstd.compress(np.ascontiguousarray(data[at : at + spec.chunk]).data)
            w.extend(np.frombuffer(frame, np.uint8))
            starts.append(starts[-1] + len(frame))
        w.extend(np.asarray(starts, "<i8").view(np.uint8))
        w.close()
    except BaseException:
        w.abort()
        raise
    del data  # the map, before the file goes
    src.unlink()


class ShardFiles:
    """One shard's arrays under `staging`, fixed-shape or ragged, in the files
    loaders.format.schema names; temp names per process and host. Use inside `writing([...])`."""

    def __init__(self, staging: Path, stem: str, h5: bool = False):
        self.staging, self.stem, self.h5 = staging, stem, h5
        self.writers: dict[str, NpyWriter | RaggedWriter] = {}
        self.parts: dict[str, Path] = {}  # file part (array, offsets) -> its temp file
        self.flat: set[str] = set()
        self.specs: dict[str, ArraySpec] = {}  # those with `compress` are compressed on publish
        self.digests: dict[Path, str] = {}  # temp file -> sha256, of those published as written

    def _file(self, part: str) -> str:
        return file_name(part, self.stem, "npy")

    def _temp(self, part: str) -> Path:
        if part in self.parts:
            raise ValueError(f"{part}: opened twice in shard {self.stem}")
        self.parts[part] = temp_path(self.staging / self._file(part))
        return self.parts[part]

    def array(
        self, name: str, dtype: str | np.dtype[Any], shape: tuple[int, ...] = ()
    ) -> NpyWriter:
        w = self.writers[name] = NpyWriter(self._temp(name), dtype, shape)
        return w

    def ragged(self, name: str, dtype: str | np.dtype[Any]) -> RaggedWriter:
        """A ragged array: its data, and its offsets (`NAME.offsets`)."""
        w = self.writers[name] = RaggedWriter(self._temp(name), self._temp(name + OFFSETS), dtype)
        return w

    def open_all(self, specs: dict[str, ArraySpec]) -> None:
        self.specs = specs
        self.flat = {name for name, s in specs.items() if s.codec == "flat"}
        for name, s in specs.items():
            if s.ragged:
                self.ragged(name, s.dtype)
            else:
                self.array(name, s.dtype, s.shape)

    def append(self, sample: dict[str, np.ndarray]) -> None:
        """One sample of every array: fixed-shape, or a ragged or flat array's values."""
        for name, w in self.writers.items():
            if name in self.flat and isinstance(w, NpyWriter):  # any count, indexed elsewhere
                w.extend(sample[name])
            else:
                w.append(sample[name])

    def extend(self, block: dict[str, np.ndarray]) -> None:
        """Many samples of every array (their first axis): a block of table rows."""
        for name, w in self.writers.items():
            if isinstance(w, RaggedWriter):
                raise TypeError(f"{name} is ragged: append() its samples one at a time")
            w.extend(block[name])

    def close(self) -> None:
        """Every file finished, then fsynced at once (sync_all: a shard's ~10 files cost about
        one fsync's wait, not ten), then closed. While the disk syncs, the files published as
        they are get their sha256 (the bench table's shard: 40 of its 55 ms of fsync)."""
        writers = list(self.writers.values())
        for w in writers:
            w.finish()
        compressed = self._compressed()
        as_is = [] if self.h5 else [p for n, p in self.parts.items() if n not in compressed]
        with ThreadPoolExecutor(1) as pool:
            synced = pool.submit(sync_all, [fd for w in writers for fd in w.filenos()])
            with stage("checksum"):
                self.digests = {path: sha256_file(path) for path in as_is}
            with core_lent():
                synced.result()
        for w in writers:
            w.release()

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()

    def _compressed(self) -> list[str]:
        """The parts compressed on publish (`--compress`), hashed then; the others as written."""
        return [name for name, spec in self.specs.items() if spec.compress and name in self.parts]

    def publish(self, count: int, split: str | None = None) -> Shard:
        """After close(): the files under final names (h5: one `shard-STEM.h5`); the Shard."""
        h5_file = f"shard-{self.stem}.h5" if self.h5 else None
        for name in self._compressed():
            tmp = temp_path(self.staging / f"{self._file(name)}.zst")
            with stage("compress"):
                write_zstd(self.parts[name], tmp, self.specs[name])
            self.parts[name] = tmp
        if h5_file is not None:
            renames = {self._as_h5(h5_file): h5_file}
        else:
            renames = {path: self._file(part) for part, path in self.parts.items()}
        files = {
            name: publish(tmp, self.staging / name, self.digests.get(tmp))
            for tmp, name in renames.items()
        }

        def ref(part: str, length: int) -> ArrayRef:  # an .h5 file's dataset is named by part
            return ArrayRef(h5_file or self._file(part), length, part if h5_file else None)

        refs: dict[str, ArrayRef] = {}
        for name, w in self.writers.items():
            refs[name] = ref(name, w.length)
            if isinstance(w, RaggedWriter):
                refs[name].offsets = ref(name + OFFSETS, w.offsets.length)
        return Shard(count, refs, files, split)

    def _as_h5(self, final: str) -> Path:
        """The temp .npy parts moved into one temp .h5 file."""
        import h5py

        h5tmp = temp_path(self.staging / final)
        try:
            with stage("write"), h5py.File(h5tmp, "w") as f:
                for name, npy in self.parts.items():  # contiguous, uncompressed
                    src = np.load(npy, mmap_mode="r", allow_pickle=False)
                    ds = f.create_dataset(name, shape=src.shape, dtype=src.dtype, track_times=False)
                    step = max(1, (64 << 20) // max(1, src[:1].nbytes))  # 64 MB at a time
                    for start in range(0, len(src), step):
                        ds[start : start + step] = src[start : start + step]
                f.flush()
            with stage("write"), open(h5tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        except BaseException as e:
            for p in (h5tmp, *self.parts.values()):
                p.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise named(e, h5tmp) from e
            raise
        for p in self.parts.values():
            p.unlink()
        return h5tmp


@contextlib.contextmanager
def writing(writers: Iterable[ShardFiles]) -> Iterator[None]:
    """Close every writer after the block; abort them all (their temp files go) if it fails."""
    try:
        yield
        with stage("write"):
            for w in writers:
                w.close()
    except BaseException:
        for w in writers:
            w.abort()
        raise


def write_shard(
    index: int,
    items: Sequence[Any],
    encode: Callable[[Any], dict[str, np.ndarray] | list[dict[str, np.ndarray]] | None],
    specs: dict[str, ArraySpec],
    storage: str,
    staging: Path,
    extra: Callable[[], dict[str, Any]] = dict,
) -> dict[str, Any]:
    """Encode `items` (of one `.split`) into shard `index`; its record (rejects named by `.rel`)
    with the keys `extra` gives once all are encoded. `encode` gives an input's sample (array
    name -> value), a list of them, or None to skip it. A failed write leaves no file behind."""
    split = getattr(items[0], "split", None) if items else None
    out = ShardFiles(staging, stem(split, index), h5=storage == "h5")
    rejects: list[dict[str, Any]] = []
    count = 0
    with writing([out]):
        with stage("write"):
            out.open_all(specs)
        for item in items:
            try:
                sample = encode(item)
            except Reject as r:
                rejects.append(reject_record(item.rel, r.code, r.message))
                continue
            if sample is None:  # skipped by the user's function: neither a sample nor a reject
                continue
            for one in sample if isinstance(sample, list) else [sample]:
                count += 1
                with stage("write"):
                    out.append(one)
    shard = out.publish(count, split)
    record = {"index": index, "shard": asdict(shard), "rejects": rejects} | extra()
    with stage("write"):
        write_record(staging, index, record)
    return record


def split_record(
    staging: Path, index: int, shards: list[Shard], rejects: list[Any], **more: Any
) -> dict[str, Any]:
    """The written record of a task that writes a shard per split: `shard` lists all their
    files (what the driver verifies), `splits` the shards."""
    done = [asdict(s) for s in shards]
    files = {k: v for s in done for k, v in s["files"].items()}
    record = {"index": index, "shard": {"files": files}, "splits": done, "rejects": rejects} | more
    with stage("write"):
        write_record(staging, index, record)
    return record


_watching: list[int] = []  # the parent pid this worker process watches, once started


def shard_task(write: Callable[..., T]) -> Callable[..., T]:
    """The task running `write`: its arguments, then `parent` (the pid of the command whose loky
    worker runs it, else None); a failed write is a write_error."""

    @functools.wraps(write)
    def task(*args: Any) -> T:
        *write_args, parent = args
        try:
            exit_with_parent(parent)
            return write(*write_args)
        except OSError as e:
            raise write_error(e) from e

    return task


def exit_with_parent(parent: int | None) -> None:
    """In a loky worker of `parent`: a thread ends this process once the parent has died, so
    that no orphan writes beside the --resume run that follows."""
    if _watching or parent is None or parent == os.getpid():
        return
    _watching.append(parent)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, name="prep-exit-with-parent", daemon=True).start()
