"""make_loader: a torch DataLoader that keeps the datasets' batched read path."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info
from torch.utils.data._utils.collate import default_collate

from loaders.samplers import ShardSampler


def check_indices(indices: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """Indices into a dataset of `n` items as int64, negatives counted from the end.

    Raises IndexError for one out of range and TypeError for a non-integer (a float index is
    a bug in the sampler, never silently truncated)."""
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
    """A whole batch read at once by a dataset's `__getitems__`: one tensor per field.

    It is also a sequence of per-sample tuples, so a plain DataLoader with the default collate
    still works (it stacks the samples again); `collate_batch` returns the tensors as they are."""

    def __init__(self, tensors: tuple[torch.Tensor, ...]):
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, j: int) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        return tuple(t[j] for t in self.tensors)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        return (self[j] for j in range(len(self)))


def collate_batch(batch: Any) -> Any:
    """Collate for datasets with a batched `__getitems__`: a Batch is already collated.
    Samples of different shapes are said to be so, not with torch's bare stack error."""
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


# How many tensors share a storage (a private torch function; without it buffers are not reused).
_storage_users = getattr(torch._C, "_storage_Use_Count", None)


def storage_users(cdata: int) -> int:
    """References to a storage (`storage._cdata`); a large number where torch cannot tell."""
    return _storage_users(cdata) if _storage_users is not None else 1 << 30


class BufferPool:
    """Batch buffers for the main process, reused once the caller has let go of them.

    A fresh 50 MB tensor costs three times its copy in page faults (glibc maps big blocks anew
    each time). A buffer is reused only when no tensor, view or numpy array but ours refers to
    its storage, and never once it was moved to shared memory (sent through a multiprocessing
    queue), so a batch the caller still holds is never overwritten. The one hold it cannot see
    is the storage object alone (`batch.untyped_storage()` kept, every tensor of it dropped):
    torch reuses one such object for a storage, so ours and the caller's look alike."""

    def __init__(self, keep: int = 2, shapes: int = 8):
        self.keep, self.shapes = keep, shapes
        self._bufs: dict[tuple[str, tuple[int, ...], torch.dtype], list[torch.Tensor]] = {}
        # Threads filling batches at once (loaders.prefetch): the check of a buffer's holds and
        # the hand-out of a view of it are one step, so two threads never get the same buffer.
        self._lock = threading.Lock()

    def get(self, field: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        with self._lock:
            return self._get(field, shape, dtype)

    def _get(self, field: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        key = (field, shape, dtype)
        bufs = self._bufs.get(key)
        if bufs is None:  # a new size or batch length (the last batch of an epoch)
            if len(self._bufs) >= self.shapes:
                del self._bufs[next(iter(self._bufs))]  # the oldest
            bufs = self._bufs[key] = []
        if _storage_users is not None:
            bufs[:] = [b for b in bufs if not b.is_shared()]  # sent to another process: theirs
            for buf in bufs:
                # 2: our tensor and the storage object made to ask.
                if _storage_users(buf.untyped_storage()._cdata) <= 2:
                    return buf.view(shape)  # a new view: the caller's hold is counted
        buf = torch.empty(shape, dtype=dtype)
        if len(bufs) < self.keep:
            bufs.append(buf)
        return buf.view(shape)


Alloc = Callable[[str, tuple[int, ...], torch.dtype], torch.Tensor]
# Where the loader's threads put batches (loaders.prefetch sets it in each of its threads): its
# own ring of buffers, or pinned memory. Per thread, so a dataset read outside the loader in
# another thread still uses its own pool.
_reading = threading.local()


def read_into(alloc: Alloc | None) -> None:
    """Make `new_batch` in this thread take its tensors from `alloc` (None: undo)."""
    _reading.alloc = alloc


def new_batch(
    shape: tuple[int, ...], dtype: torch.dtype, pool: BufferPool | None = None, key: str = ""
) -> torch.Tensor:
    """An output tensor for a batch. In one of make_loader's threads it comes from the loader's
    ring (or pinned memory), in one of its worker processes from that worker's ring of shared
    memory (see `read_into`). Inside another DataLoader's worker it is made in shared memory
    directly, so the batch is not copied again when it is sent to the main process; in the
    main process it comes from `pool` when one is given."""
    alloc = getattr(_reading, "alloc", None)
    if alloc is not None:
        return alloc(key, shape, dtype)
    if get_worker_info() is None:
        return pool.get(key, shape, dtype) if pool is not None else torch.empty(shape, dtype=dtype)
    nbytes = int(torch.Size(shape).numel()) * dtype.itemsize
    return torch.empty(0, dtype=dtype).set_(new_shared(nbytes), 0, shape)  # type: ignore[call-overload]


def new_shared(nbytes: int) -> torch.UntypedStorage:
    """Shared memory for a batch, as default_collate makes it. `share_memory_()` on a new
    tensor would copy its garbage into a fresh segment (6x slower for a 256-image batch)."""
    return torch.UntypedStorage._new_shared(nbytes)


# make_loader's default reading threads. On 2 busy cores 1 thread hid loading best (bench row
# 4d): reads in parallel each take longer, and the caller waits for them in order. A dataset
# may ask for more (`read_threads`: ImageShardDataset's decoding ones, whose pool does the work).
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
    workers; any other DataLoader argument passes through and wins over these defaults. With
    `num_workers=0`, `threads` threads (default: the dataset's `read_threads`, else THREADS)
    read ahead while the step runs, into a ring of reused buffers, in `threads=0`'s batch order
    (loaders.prefetch). Worker processes are for Python-heavy datasets (the GIL serialises threads).

    Order and ranks (a `ShardSampler` in `loader.sampler`, see loaders.samplers):

    - `order`: "sequential", "random" or "quasi_random" (shuffle the shards, then the samples
      within windows of `window` shards); default "random" with `shuffle`, else "sequential".
      Shuffled orders depend only on (`seed`, epoch): the same for any `num_workers`; each pass
      over the loader advances the epoch (`loader.sampler.set_epoch(e)` sets it).
    - `distributed`: each rank reads a disjoint share of every epoch, all ranks the same number
      of batches. Default: on when torch.distributed is initialised.
    - `drop_last`: False pads the ranks' shares by repeating the epoch's first samples and keeps
      a last, smaller batch; True leaves the remainder out of the epoch (different samples each
      epoch) so that every batch is full.
    """
    _check_batches(dataset, batch_size)
    distributed = _distributed(distributed)
    if order is None:
        order = "random" if shuffle else "sequential"
    elif shuffle and order == "sequential":
        raise ValueError("shuffle=True contradicts order='sequential'; pass one of them")
    kwargs: dict[str, Any] = {
        "collate_fn": collate_batch,
        "pin_memory": torch.cuda.is_available(),
        "persistent_workers": num_workers > 0,
        "drop_last": drop_last,
    }
    if distributed or order != "sequential":
        if {"sampler", "batch_sampler"} & dataloader_kwargs.keys():
            raise ValueError("a sampler of your own replaces order=/distributed=: pass one")
        kwargs["sampler"] = _sampler(dataset, order, seed, window, distributed, drop_last)
        shuffle = False  # the sampler orders
    kwargs.update(dataloader_kwargs)
    from loaders.prefetch import Loader  # it subclasses DataLoader with this module's pool

    return Loader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        threads=(getattr(dataset, "read_threads", None) or THREADS) if threads is None else threads,
        **kwargs,
    )


def _check_batches(dataset: Dataset[Any], batch_size: int) -> None:
    """Refuse at once a dataset whose samples cannot be stacked into batches of this size
    (VolumeDataset.batch_problem: whole volumes of several shapes)."""
    problem = getattr(dataset, "batch_problem", None)
    said = problem(batch_size) if problem is not None else None
    if said is not None:
        raise ValueError(said)


def _distributed(asked: bool | None) -> bool:
    """Whether to share epochs between ranks: default, when torch.distributed is initialised."""
    ddp = torch.distributed.is_available() and torch.distributed.is_initialized()
    if asked and not ddp:
        raise ValueError(
            "distributed=True needs torch.distributed initialised first: call "
            "torch.distributed.init_process_group() (torchrun sets its environment)"
        )
    return ddp if asked is None else asked


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
