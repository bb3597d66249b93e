"""A pass of a loader without worker processes: threads read the next batches while the step
runs (the copies release the GIL), each into the loader's reused buffers (or pinned ones)."""

from __future__ import annotations

import itertools
import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from torch.utils.data import BatchSampler
from torch.utils.data._utils.fetch import _MapDatasetFetcher
from torch.utils.data._utils.pin_memory import pin_memory

from loaders.read.buffers import Alloc, BufferPool, pinned, read_into


class Ahead(Protocol):
    """What a pass reads with: a Loader (loaders.read.loader), a DataLoader with threads."""

    threads: int
    depth: int  # batches in flight
    pins: bool
    ring: BufferPool
    dataset: Any
    collate_fn: Any
    drop_last: bool
    batch_sampler: Any

    @property
    def _auto_collation(self) -> bool: ...

    @property
    def _index_sampler(self) -> Any: ...


def _read(fetcher: _MapDatasetFetcher, pin: bool, index: Any) -> Any:
    data = fetcher.fetch(index)
    return pin_memory(data) if pin else data  # a no-op for tensors pinned already


def read_ahead(loader: Ahead) -> Iterator[Any]:
    """One pass: `loader.depth` batches read ahead (the first alone), a read's exception raised
    with its batch; the threads end with the pass, or when the iterator is dropped."""
    pin = loader.pins
    alloc: Alloc = pinned if pin else loader.ring.get
    fetcher = _MapDatasetFetcher(
        loader.dataset, loader._auto_collation, loader.collate_fn, loader.drop_last
    )
    bs = loader.batch_sampler  # the epoch advances here, as without threads
    batches = getattr(getattr(bs, "sampler", None), "batches", None)
    # A ShardSampler's batches as numpy slices: a Python int per index cost a quarter of an epoch
    if type(bs) is BatchSampler and batches is not None:
        indices = iter(batches(bs.batch_size, bs.drop_last))
    else:
        indices = iter(loader._index_sampler)
    pool = ThreadPoolExecutor(
        loader.threads, "prep-loader", initializer=read_into, initargs=(alloc,)
    )
    pending: deque[Future[Any]] = deque()
    try:
        for index in itertools.islice(indices, 1):
            pending.append(pool.submit(_read, fetcher, pin, index))
        while pending:
            batch = pending.popleft().result()
            for index in itertools.islice(indices, loader.depth - len(pending)):
                pending.append(pool.submit(_read, fetcher, pin, index))
            yield batch  # `depth` batches in flight while the caller uses this one
    finally:  # reads not started are cancelled, running ones finish
        for future in pending:
            future.cancel()
        if not sys.is_finalizing():  # at exit shutdown()'s modules are gone
            pool.shutdown(wait=True, cancel_futures=True)
