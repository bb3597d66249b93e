"""Loader: a DataLoader that, without worker processes, reads the next batches in threads.

Reading packed uint8 is a copy out of the page cache, and numpy and torch release the GIL for
it, so a few threads of the training process read ahead while the step runs, as FFCV's loader
does, with no process to start, no pickling, and no fresh shared memory per batch. The threads
fill a small ring of buffers that the loader keeps across epochs (`BufferPool`: a buffer is
handed out again only once nothing but the ring refers to it, so a batch the caller still holds
is never overwritten) or, when batches are pinned for a GPU, torch's caching pinned-memory
allocator (which also waits for a non-blocking copy to the GPU to finish before a block is
reused).

The batches and their order are those of the same DataLoader without threads: the sampler is
iterated in the calling thread, one batch of indices per read, and the reads are returned in
that order. Processes (`num_workers > 0`) stay for Python-heavy datasets, which threads would
serialise on the GIL.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset
from torch.utils.data._utils.fetch import _MapDatasetFetcher
from torch.utils.data._utils.pin_memory import pin_memory

from loaders.read.batches import Alloc, BufferPool, read_into
from loaders.read.workers import CopyOut, StartWorker, pinned


class Loader(DataLoader[Any]):
    """A DataLoader whose pass with `num_workers=0` reads `threads` batches ahead in threads,
    and whose worker processes (`num_workers > 0`, with `shared_ring`) reuse their shared
    memory (loaders.read.workers).

    `threads=0` and no ring, or an IterableDataset: exactly DataLoader. Everything else
    (sampler, batch_sampler, len, batch_size, drop_last) is DataLoader's; with the ring,
    `pin_memory` reads False and `pins` says whether batches come out pinned."""

    def __init__(self, dataset: Any, *, threads: int = 0, shared_ring: bool = True, **kw: Any):
        if threads < 0:
            raise ValueError(f"threads {threads} must be 0 or more")
        workers = kw.get("num_workers", 0)
        self.pins = bool(kw.get("pin_memory")) and torch.cuda.is_available()
        self.shares = shared_ring and workers > 0
        if self.shares:  # the main process pins as it copies out of the ring
            keep = (kw.get("prefetch_factor") or 2) + 2  # in flight, being made, being copied
            self.passes = torch.zeros((), dtype=torch.int64).share_memory_()
            kw["worker_init_fn"] = StartWorker(keep, self.passes, kw.get("worker_init_fn"))
            # Segments of the workers' rings, two fields a batch, held across passes.
            self.seen: deque[Any] = deque(maxlen=4 * workers * keep)
            kw["pin_memory"] = False
        super().__init__(dataset, **kw)
        iterable = isinstance(dataset, IterableDataset)
        self.threads = threads if workers == 0 and not iterable else 0
        # Batches in flight: one a thread, and one more so that no thread waits while the
        # caller takes a batch. The ring holds those, the caller's batch and the one before it
        # (still bound to the loop variable while the next is asked for): more, and a batch is
        # made afresh (correct, only slower).
        self.depth = self.threads + 1
        self.ring = BufferPool(keep=self.depth + 2)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.threads:
            return ThreadedIter(self)
        if not self.shares:
            return super().__iter__()
        self.passes += 1  # before the workers are reset: see SharedRing
        batches = super().__iter__()
        return CopyOut(batches, self.ring, self.pins, self.seen)


def _index_batches(loader: Loader) -> Iterator[Any]:
    """The pass's batches of indices: a ShardSampler's as numpy slices of its epoch order (a
    Python int per index costs a quarter of a table epoch), any other sampler's as DataLoader
    makes them."""
    bs = loader.batch_sampler
    batches = getattr(getattr(bs, "sampler", None), "batches", None)
    if type(bs) is BatchSampler and batches is not None:
        return iter(batches(bs.batch_size, bs.drop_last))
    return iter(loader._index_sampler)


def _read(fetcher: _MapDatasetFetcher, pin: bool, index: Any) -> Any:
    data = fetcher.fetch(index)
    return pin_memory(data) if pin else data  # a no-op for tensors pinned already


class ThreadedIter(Iterator[Any]):
    """One pass over a Loader: `loader.depth` batches read ahead by `loader.threads` threads
    (the first batch alone).

        An exception raised while reading a batch is raised here, when that batch is asked for,
        with its original traceback. The threads end with the pass: at its end, at an exception,
        or when the iterator is dropped (a `break` out of the loop); reads already running finish
        first (one batch each), reads not started are cancelled."""

    def __init__(self, loader: Loader):
        self._pin = loader.pins
        alloc: Alloc = pinned if self._pin else loader.ring.get
        self._fetcher = _MapDatasetFetcher(
            loader.dataset, loader._auto_collation, loader.collate_fn, loader.drop_last
        )
        self._indices = _index_batches(loader)  # the epoch advances here, as without threads
        self._pool = ThreadPoolExecutor(
            loader.threads, "prep-loader", initializer=read_into, initargs=(alloc,)
        )
        self._pending: deque[Future[Any]] = deque()
        self._done, self._depth = False, loader.depth
        # Start reading now, as DataLoader's workers do, but the first batch alone: on busy
        # cores reads in parallel would each take longer, and the caller waits for the first.
        self._submit()

    def _submit(self) -> None:
        if self._done:
            return
        try:
            index = next(self._indices)
        except StopIteration:
            self._done = True
            return
        except BaseException:
            self.close()
            raise
        # Not a method of self: the threads must not hold the iterator, so that dropping it in
        # the caller's thread ends them there.
        self._pending.append(self._pool.submit(_read, self._fetcher, self._pin, index))

    def __next__(self) -> Any:
        if not self._pending:
            self.close()
            raise StopIteration
        future = self._pending.popleft()
        try:
            batch = future.result()
        except BaseException:
            self.close()
            raise
        while len(self._pending) < self._depth and not self._done:
            self._submit()  # `depth` batches in flight while the caller uses this one
        return batch

    def close(self) -> None:
        """Stop reading ahead: cancel the reads not started, wait for the running ones."""
        self._done = True
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __del__(self) -> None:
        # __init__ may have failed before the pool was made; at interpreter exit the modules
        # shutdown() uses are gone, and the threads end with the process anyway
        if hasattr(self, "_pool") and not sys.is_finalizing():
            self.close()
