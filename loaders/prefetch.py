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

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data._utils.fetch import _MapDatasetFetcher
from torch.utils.data._utils.pin_memory import pin_memory

from loaders.loader import Alloc, BufferPool, read_into


class Loader(DataLoader[Any]):
    """A DataLoader whose pass with `num_workers=0` reads `threads` batches ahead in threads.

    `threads=0`, worker processes, or an IterableDataset: exactly DataLoader. Everything else
    (sampler, batch_sampler, len, batch_size, drop_last, pin_memory) is DataLoader's."""

    def __init__(self, dataset: Any, *args: Any, threads: int = 0, **kwargs: Any):
        if threads < 0:
            raise ValueError(f"threads {threads} must be 0 or more")
        super().__init__(dataset, *args, **kwargs)
        iterable = isinstance(dataset, IterableDataset)
        self.threads = threads if self.num_workers == 0 and not iterable else 0
        # Batches in flight: one a thread, and one more so that no thread waits while the
        # caller takes a batch. The ring holds those, the caller's batch and the one before it
        # (still bound to the loop variable while the next is asked for): more, and a batch is
        # made afresh (correct, only slower).
        self.depth = self.threads + 1
        self.ring = BufferPool(keep=self.depth + 2)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.threads == 0:
            return super().__iter__()
        return ThreadedIter(self)


def _pinned(key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def _read(fetcher: _MapDatasetFetcher, pin: bool, index: Any) -> Any:
    data = fetcher.fetch(index)
    return pin_memory(data) if pin else data  # a no-op for tensors pinned already


class ThreadedIter(Iterator[Any]):
    """One pass over a Loader: `loader.depth` batches read ahead by `loader.threads` threads.

    An exception raised while reading a batch is raised here, when that batch is asked for,
    with its original traceback. The threads end with the pass: at its end, at an exception,
    or when the iterator is dropped (a `break` out of the loop); reads already running finish
    first (one batch each), reads not started are cancelled."""

    def __init__(self, loader: Loader):
        self._pin = loader.pin_memory and torch.cuda.is_available()
        alloc: Alloc = _pinned if self._pin else loader.ring.get
        self._fetcher = _MapDatasetFetcher(
            loader.dataset, loader._auto_collation, loader.collate_fn, loader.drop_last
        )
        self._indices = iter(loader._index_sampler)  # the epoch advances here, as without threads
        self._pool = ThreadPoolExecutor(
            loader.threads, "prep-loader", initializer=read_into, initargs=(alloc,)
        )
        self._pending: deque[Future[Any]] = deque()
        self._done = False
        for _ in range(loader.depth):  # start reading now, as DataLoader's workers do
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
        self._submit()  # keep `depth` batches in flight while this one is waited for
        try:
            return future.result()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop reading ahead: cancel the reads not started, wait for the running ones."""
        self._done = True
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __del__(self) -> None:
        if hasattr(self, "_pool"):  # __init__ may have failed before it was made
            self.close()
