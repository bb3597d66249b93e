"""Batches and the memory they are read into: index checks, the Batch a dataset returns, and
the buffers reused between batches (BufferPool in the main process, a worker's SharedRing, or
the loader's pinned memory: `new_batch` asks the one this thread was given by `read_into`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch.utils.data import get_worker_info


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


# How many tensors share a storage (a private torch function; without it buffers are not reused).
_storage_users = getattr(torch._C, "_storage_Use_Count", None)


def storage_users(cdata: int) -> int:
    """References to a storage (`storage._cdata`); a large number where torch cannot tell."""
    return _storage_users(cdata) if _storage_users is not None else 1 << 30


T = TypeVar("T")


class Ring(Generic[T]):
    """Reusable buffers: up to `keep` for each key (a field, shape and dtype), at most `shapes`
    keys (a new size or batch length drops the oldest). BufferPool's and the workers'
    SharedRing's one algorithm: hand out the first free buffer of a key, else a new one, kept
    while the key has fewer than `keep`."""

    def __init__(self, keep: int, shapes: int):
        self.keep, self.shapes = keep, shapes
        self._bufs: dict[Any, list[T]] = {}

    def slots(self, key: Any) -> list[T]:
        """The buffers kept for `key` (a list the caller may prune)."""
        found = self._bufs.get(key)
        if found is None:
            if len(self._bufs) >= self.shapes:
                del self._bufs[next(iter(self._bufs))]  # the oldest
            found = self._bufs[key] = []
        return found

    def take(self, slots: list[T], free: Callable[[T], bool], make: Callable[[], T]) -> T:
        for buf in slots:
            if free(buf):
                return buf
        buf = make()
        if len(slots) < self.keep:
            slots.append(buf)
        return buf

    def all(self) -> list[T]:
        return [b for bufs in self._bufs.values() for b in bufs]


class BufferPool(Ring[torch.Tensor]):
    """Batch buffers for the main process, reused once the caller has let go of them.

    A fresh 50 MB tensor costs three times its copy in page faults (glibc maps big blocks anew
    each time). A buffer is reused only when no tensor, view or numpy array but ours refers to
    its storage, and never once it was moved to shared memory (sent through a multiprocessing
    queue), so a batch the caller still holds is never overwritten. The one hold it cannot see
    is the storage object alone (`batch.untyped_storage()` kept, every tensor of it dropped):
    torch reuses one such object for a storage, so ours and the caller's look alike."""

    def __init__(self, keep: int = 2, shapes: int = 8):
        super().__init__(keep, shapes)
        # Threads filling batches at once (loaders.read.prefetch): the check of a buffer's holds and
        # the hand-out of a view of it are one step, so two threads never get the same buffer.
        self._lock = threading.Lock()

    def get(self, field: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        with self._lock:
            bufs = self.slots((field, shape, dtype))
            bufs[:] = [b for b in bufs if not b.is_shared()]  # sent to another process: theirs
            buf = self.take(bufs, _unheld, lambda: torch.empty(shape, dtype=dtype))
            return buf.view(shape)  # a new view: the caller's hold is counted


def _unheld(buf: torch.Tensor) -> bool:
    """No tensor, view or array but ours refers to `buf`'s storage (2: our tensor and the
    storage object made to ask); never, where torch cannot tell."""
    return _storage_users is not None and _storage_users(buf.untyped_storage()._cdata) <= 2


Alloc = Callable[[str, tuple[int, ...], torch.dtype], torch.Tensor]
# Where the loader's threads put batches (loaders.read.prefetch sets it in each of its threads): its
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
