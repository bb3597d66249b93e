"""make_loader: a DataLoader that keeps the datasets' batched reads. Without worker processes,
threads read ahead while the step runs (the copies release the GIL) into reused buffers, in
the plain DataLoader's order; workers' batches are copied out of their shared-memory rings."""

from __future__ import annotations

import itertools
import os
import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset
from torch.utils.data._utils.collate import default_collate
from torch.utils.data._utils.fetch import _MapDatasetFetcher
from torch.utils.data._utils.pin_memory import pin_memory

from loaders.read.batches import Alloc, Batch, BufferPool, StartWorker, copy_out, read_into
from loaders.read.samplers import ShardSampler


def collate_batch(batch: Any) -> Any:
    """A Batch as it is; samples of different shapes said to be so, not by torch's bare error."""
    if isinstance(batch, Batch):
        return batch.tensors
    try:
        return default_collate(batch)
    except RuntimeError as e:
        if "equal size" not in str(e):
            raise
        parts = [t for s in batch for t in (s if isinstance(s, (tuple, list)) else (s,))]
        shapes = sorted({tuple(t.shape) for t in parts if torch.is_tensor(t)})
        raise ValueError(
            f"the samples of a batch differ in shape ({', '.join(map(str, shapes[:3]))}): they "
            "cannot be stacked. HINT: pack one shape (prep volumes --shape, prep pack without "
            "--mode keep), read fixed-size patches (PatchDataset), or load with batch_size=1"
        ) from None


# Reading threads (a dataset may ask for more: `read_threads`): 1 hid loading best on 2 cores
THREADS = 1 if (os.cpu_count() or 1) <= 2 else 2


def make_loader(
    dataset: Dataset[Any],
    batch_size: int,
    shuffle: bool = False,
    num_workers: int = 0,
    *,
    order: str | None = None,
    seed: int = 0,
    window: int = 8,
    distributed: bool | None = None,
    drop_last: bool = False,
    threads: int | None = None,
    **dataloader_kwargs: Any,
) -> DataLoader[Any]:
    """A DataLoader reading whole batches per call, pinned when a GPU is present, with persistent
    workers (DataLoader's arguments pass through and win); with `num_workers=0`, `threads`
    threads read ahead. `order` (loaders.read.samplers; default "random" with `shuffle`)
    depends only on (`seed`, epoch); `distributed` (default: when torch.distributed is
    initialised): each rank a disjoint share, padded (or cut, `drop_last`) to one length."""
    problem = getattr(dataset, "batch_problem", None)  # whole volumes of several shapes
    said = problem(batch_size) if problem is not None else None
    if said is not None:
        raise ValueError(said)
    ddp = torch.distributed.is_available() and torch.distributed.is_initialized()
    if distributed and not ddp:
        raise ValueError(
            "distributed=True needs torch.distributed initialised first: call "
            "torch.distributed.init_process_group() (torchrun sets its environment)"
        )
    distributed = ddp if distributed is None else distributed
    if order is None:
        order = "random" if shuffle else "sequential"
    elif shuffle and order == "sequential":
        raise ValueError("shuffle=True contradicts order='sequential'; pass one of them")
    kwargs: dict[str, Any] = {
        "collate_fn": collate_batch,
        "pin_memory": torch.cuda.is_available(),
        "persistent_workers": num_workers > 0,
        "drop_last": drop_last,
        "num_workers": num_workers,
    }
    if distributed or order != "sequential":
        if {"sampler", "batch_sampler"} & dataloader_kwargs.keys():
            raise ValueError("a sampler of your own replaces order=/distributed=: pass one")
        kwargs["sampler"] = _sampler(dataset, order, seed, window, distributed, drop_last)
        shuffle = False  # the sampler orders
    kwargs.update(dataloader_kwargs)
    threads = (getattr(dataset, "read_threads", None) or THREADS) if threads is None else threads
    return Loader(dataset, batch_size=batch_size, shuffle=shuffle, threads=threads, **kwargs)


def _sampler(
    dataset: Dataset[Any], order: str, seed: int, window: int, distributed: bool, drop_last: bool
) -> ShardSampler:
    sizes = getattr(dataset, "shard_sizes", None)
    if sizes is None:
        if order == "quasi_random":
            raise ValueError(
                f"{type(dataset).__name__} has no shard_sizes, which order='quasi_random' "
                "needs; use order='random'"
            )
        sizes = [len(dataset)]  # type: ignore[arg-type]
    ranks = {} if distributed else {"num_replicas": 1, "rank": 0}
    sampler = ShardSampler(sizes, order, seed, window, drop_last=drop_last, **ranks)
    sampler.follow(dataset)  # a remote dataset prefetches the next quasi_random window
    return sampler


class Loader(DataLoader[Any]):
    """A DataLoader reading ahead in `threads` threads, or in workers reusing shared memory."""

    def __init__(self, dataset: Any, *, threads: int = 0, **kw: Any):
        if threads < 0:
            raise ValueError(f"threads {threads} must be 0 or more")
        workers = kw.get("num_workers", 0)
        self.pins = bool(kw.get("pin_memory")) and torch.cuda.is_available()
        self.shares = workers > 0
        if self.shares:  # the main process pins as it copies out of the ring
            keep = (kw.get("prefetch_factor") or 2) + 2  # in flight, being made, being copied
            self.passes = torch.zeros((), dtype=torch.int64).share_memory_()
            kw["worker_init_fn"] = StartWorker(keep, self.passes, kw.get("worker_init_fn"))
            self.seen: deque[Any] = deque(maxlen=4 * workers * keep)
            kw["pin_memory"] = False
        super().__init__(dataset, **kw)
        iterable = isinstance(dataset, IterableDataset)
        self.threads = threads if workers == 0 and not iterable else 0
        # In flight: one a thread, and one more; the ring holds those, the caller's, and the one
        # before it (still bound to the loop variable while the next is asked for).
        self.depth = self.threads + 1
        self.ring = BufferPool(keep=self.depth + 2)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.threads:
            return _read_ahead(self)
        if not self.shares:
            return super().__iter__()
        self.passes += 1  # before the workers are reset: see SharedRing
        batches = super().__iter__()
        alloc = pinned if self.pins else self.ring.get  # pinned for a GPU
        return (copy_out(batch, alloc, self.seen) for batch in batches)


def _read(fetcher: _MapDatasetFetcher, pin: bool, index: Any) -> Any:
    data = fetcher.fetch(index)
    return pin_memory(data) if pin else data  # a no-op for tensors pinned already


def _read_ahead(loader: Loader) -> Iterator[Any]:
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


def pinned(key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, pin_memory=True)
