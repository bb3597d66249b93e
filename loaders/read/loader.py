"""make_loader: a DataLoader that keeps the datasets' batched reads. Without worker processes,
threads read ahead while the step runs (loaders.read.readahead) into reused buffers (`new_batch`,
loaders.read.buffers); workers read into SharedRings of segments (loaders.read.ring). Also the
pieces datasets share: `check_indices`, `Batch` and `collate_batch`."""

from __future__ import annotations

import functools
import gc
import multiprocessing
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch.utils.data._utils.collate import default_collate

from loaders.read import state
from loaders.read.buffers import BufferPool, current_alloc, pinned
from loaders.read.readahead import read_ahead
from loaders.read.ring import SPARE, Segments, StartWorker, in_ring
from loaders.read.samplers import WINDOWED, ShardSampler
from loaders.read.workers import PackInWorker, capped


def check_indices(indices: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """Indices into `n` items as int64 (negatives from the end); IndexError, TypeError if bad."""
    idx = np.asarray(indices).reshape(-1)
    if idx.size and idx.dtype.kind not in "iu":
        raise TypeError(f"dataset indices must be integers, got {idx.dtype}: {idx[:3].tolist()}")
    if idx.size and idx.dtype.kind == "u" and idx.max() >= n:  # before the cast can wrap it
        raise IndexError(f"index {idx.max()} out of range for a dataset of {n} items")
    idx = idx.astype(np.int64, copy=False)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = idx[(idx < -n) | (idx >= n)][0]
        raise IndexError(f"index {bad} out of range for a dataset of {n} items")
    return np.where(idx < 0, idx + n, idx)


class Batch(Sequence[tuple[torch.Tensor, ...]]):
    """A batch, one tensor a field; a sequence of sample tuples to DataLoader's default collate.

    Examples:
        >>> import torch
        >>> from loaders import Batch
        >>> batch = Batch((torch.zeros(2, 3, 8, 8), torch.tensor([4, 7])))
        >>> len(batch), batch[1][1].item()
        (2, 7)
    """

    def __init__(self, tensors: tuple[torch.Tensor, ...]):
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, j: int) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        return tuple(t[j] for t in self.tensors)


def collate_batch(batch: Any) -> Any:
    """A Batch as it is; samples of different shapes said to be so, not by torch's bare error.

    Examples:
        >>> import torch
        >>> from loaders import ImageShardDataset, collate_batch
        >>> ds = ImageShardDataset("data/demo-packed", size=128)
        >>> loader = torch.utils.data.DataLoader(ds, batch_size=8, collate_fn=collate_batch)
        >>> images, labels = next(iter(loader))
        >>> images.shape
        torch.Size([8, 3, 128, 128])
    """
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
    window: int | None = None,
    distributed: bool | None = None,
    drop_last: bool = False,
    threads: int | None = None,
    **dataloader_kwargs: Any,
) -> DataLoader[Any]:
    """A DataLoader reading whole batches per call, pinned when a GPU is present, with persistent
    workers, at most one a core the process may use (DataLoader's arguments pass through and
    win); with `num_workers=0`, `threads` threads read ahead. `order` (loaders.read.samplers;
    default "random" with `shuffle`) depends only on (`seed`, epoch); `distributed` (default:
    when torch.distributed is initialised): each rank a disjoint share, padded (or cut,
    `drop_last`) to one length. `window`: shards a window of "quasi_random" (default 8), chunks
    one of "chunk_random" (default: the dataset's `chunk_window`).

    Examples:
        >>> from loaders import ImageShardDataset, make_loader
        >>> ds = ImageShardDataset("data/demo-packed", size=128)
        >>> loader = make_loader(ds, batch_size=16, shuffle=True, seed=0)
        >>> images, labels = next(iter(loader))
        >>> images.shape, labels.dtype
        (torch.Size([16, 3, 128, 128]), torch.int64)
    """
    distributed = _check_args(dataset, batch_size, distributed)
    num_workers = capped(num_workers)  # called here: its warning names make_loader's caller
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
    sampler = _sampler(dataset, order, seed, window, distributed, drop_last, dataloader_kwargs)
    if sampler is not None:
        kwargs["sampler"] = sampler
        shuffle = False  # the sampler orders
    kwargs.update(dataloader_kwargs)
    threads = (getattr(dataset, "read_threads", None) or THREADS) if threads is None else threads
    return Loader(dataset, batch_size=batch_size, shuffle=shuffle, threads=threads, **kwargs)


def _lends(context: Any) -> bool:
    """Whether workers of `context` (a DataLoader's multiprocessing_context) are forked and
    share memory by file descriptor: a spare segment's descriptor is theirs too (ring.SPARE)."""
    method = context.get_start_method() if context is not None else None
    method = method or multiprocessing.get_start_method(allow_none=True)
    fds = torch.multiprocessing.get_sharing_strategy() == "file_descriptor"
    return fds and (method or multiprocessing.get_all_start_methods()[0]) == "fork"


def _check_args(dataset: Dataset[Any], batch_size: int, distributed: bool | None) -> bool:
    """Whether the loader is distributed; ValueError where the dataset cannot make batches of
    `batch_size`, or `distributed` is asked for without torch.distributed."""
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
    return ddp if distributed is None else distributed


def _sampler(
    dataset: Dataset[Any],
    order: str,
    seed: int,
    window: int | None,
    distributed: bool,
    drop_last: bool,
    dataloader_kwargs: Mapping[str, Any],
) -> ShardSampler | None:
    """The ShardSampler of `order` over the dataset's shards; None for a sampler of the user's
    own (ValueError if it contradicts `order` or `distributed`) or an IterableDataset."""
    own = {"sampler", "batch_sampler"} & dataloader_kwargs.keys()
    if own and (distributed or order != "sequential"):
        raise ValueError("a sampler of your own replaces order=/distributed=: pass one")
    if own or isinstance(dataset, IterableDataset):  # (its state: loaders.read.state)
        return None
    blocks = order == "chunk_random"  # its units are a compressed dataset's chunks, not shards
    sizes = getattr(dataset, "chunk_sizes" if blocks else "shard_sizes", None)
    if sizes is None and order in WINDOWED:
        raise ValueError(
            f"{type(dataset).__name__} has no {'chunk' if blocks else 'shard'}_sizes, which "
            f"order={order!r} needs; use order='random'"
        )
    if window is None:
        window = getattr(dataset, "chunk_window", 8) if blocks else 8
    ranks = {} if distributed else {"num_replicas": 1, "rank": 0}
    n = len(dataset)  # type: ignore[arg-type]
    sizes = [n] if sizes is None else sizes
    if sum(sizes) != n:
        raise ValueError(
            f"{type(dataset).__name__}'s shard_sizes sum to {sum(sizes)}, not its length "
            f"{n}: an order of them would leave samples out"
        )
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
        if self.shares:  # the main process hands batches out of the rings (pinned: copied)
            keep = (kw.get("prefetch_factor") or 2) + 2  # in flight, being made, the caller's
            self.passes = torch.zeros((), dtype=torch.int64).share_memory_()
            self.start = StartWorker(keep, self.passes, kw.get("worker_init_fn"))
            kw["worker_init_fn"] = self.start
            if kw.get("collate_fn") is not None:  # (None: DataLoader's choice, kept)
                kw["collate_fn"] = PackInWorker(kw["collate_fn"], current_alloc, in_ring)
            self.seen = Segments(most=4 * workers * keep)
            kw["pin_memory"] = False
        super().__init__(dataset, **kw)
        iterable = isinstance(dataset, IterableDataset)
        self.threads = threads if workers == 0 and not iterable else 0
        # In flight: one a thread, and one more; the ring holds those, the caller's, and the one
        # before it (still bound to the loop variable while the next is asked for).
        self.depth = self.threads + 1
        self.ring = BufferPool(keep=self.depth + 2)
        self.progress: state.Pass | None = None  # the last pass: its batches handed out

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        self.progress = now = state.begin(self)  # before the sampler is asked for indices
        if self.threads:
            batches = read_ahead(self)
        elif not self.shares:
            batches = super().__iter__()
        else:
            self.passes += 1  # before the workers are reset: see SharedRing
            self.seen.let_go()  # before the workers start: the last pass's batches let go
            batches = self._handed_out(super().__iter__())
        return batches if now is None else state.counted(batches, now)

    def _handed_out(self, batches: Iterator[Any]) -> Iterator[Any]:
        """The workers' batches as they made them (copied to pinned memory for a GPU), the
        segments of those before freed as soon as the caller lets go (before each wait)."""
        alloc = pinned if self.pins else None
        for batch in batches:
            yield self.seen.hand_out(batch, alloc)
            self.seen.let_go()  # the caller asks for the next: before waiting for it

    def _get_iterator(self) -> Any:
        """The pass's iterator; with workers, new ones started, lent the spare segments where
        they are forked (`ring.SPARE`), which take back theirs once they are shut down."""
        if not self.shares:
            return super()._get_iterator()
        self.seen = Segments(self.seen.most)  # these workers' segments
        lent = SPARE.lend(self.num_workers) if _lends(self.multiprocessing_context) else []
        self.start.lent = [[(s._share_fd_cpu_()[0], s.nbytes()) for s in own] for own in lent]
        self.seen.adopt(s for own in lent for s in own)
        # Frozen, this process's objects are left alone by forked workers' collections, whose
        # writes would copy their pages (a fresh 2-worker epoch: 12k faults, ~40 ms); unless
        # the caller froze some: theirs to thaw.
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            it = super()._get_iterator()
        finally:
            if freeze:
                gc.unfreeze()
            self.start.lent = []
        del lent  # the segments are the loader's: one header each, in self.seen
        workers = it._workers  # type: ignore[attr-defined]
        weakref.finalize(it, SPARE.keep, os.getpid(), workers, self.seen).atexit = False
        return it

    @functools.cached_property
    def fingerprint(self) -> str:  # of the dataset, for a state (loaders.read.state)
        return state.fingerprint(self.dataset)

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is, JSON-able: the next sample it would hand out (any rank's, any
        worker count's); batches read ahead but not handed out are not counted."""
        return state.save(self)

    def load_state_dict(self, saved: Mapping[str, Any]) -> None:
        """Resume at `saved` (a `state_dict()`, of any rank): the next pass reads the rest."""
        state.load(self, saved)
