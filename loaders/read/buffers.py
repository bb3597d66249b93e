"""Where a batch's tensors come from: `new_batch` takes them from what `read_into` set for this
thread (a worker: its SharedRing, loaders.read.ring), or from a BufferPool of the main process,
whose buffers are reused once nothing else refers to them; `pinned` for a GPU."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch
from torch.utils.data import get_worker_info

T = TypeVar("T")
Alloc = Callable[[str, tuple[int, ...], torch.dtype], torch.Tensor]
# How many tensors share a storage (a private torch function; without it buffers are not reused).
_storage_users = getattr(torch._C, "_storage_Use_Count", None)


def unheld(t: torch.Tensor) -> bool:
    """No tensor, view or array but ours refers to `t`'s storage (2: ours and the one asking)."""
    return _storage_users is not None and _storage_users(t.untyped_storage()._cdata) <= 2


class Ring(Generic[T]):
    """Up to `keep` reusable buffers a key (field, shape, dtype), at most 8 keys."""

    def __init__(self, keep: int):
        self.keep = keep
        self._bufs: dict[Any, list[T]] = {}

    def slots(self, key: Any) -> list[T]:  # a list the caller may prune
        found = self._bufs.get(key)
        if found is None:
            if len(self._bufs) >= 8:
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


class BufferPool(Ring[torch.Tensor]):
    """The main process's batch buffers, reused once nothing but the pool refers to them (but a
    storage object kept alone), never once in shared memory (50 MB faults in as 3 copies)."""

    def __init__(self, keep: int = 2):
        super().__init__(keep)
        self._lock = threading.Lock()  # loader threads: never one buffer to two of them

    def get(self, field: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        with self._lock:
            bufs = self.slots((field, shape, dtype))
            bufs[:] = [b for b in bufs if not b.is_shared()]  # sent to another process: theirs
            buf = self.take(bufs, unheld, lambda: torch.empty(shape, dtype=dtype))
            return buf.view(shape)  # a new view: the caller's hold is counted


# Where this thread's `new_batch` takes its tensors (a thread outside the loader: its pool)
_reading = threading.local()


def current_alloc() -> Alloc | None:
    """What `new_batch` in this thread takes its tensors from (a worker: its SharedRing)."""
    return getattr(_reading, "alloc", None)


def read_into(alloc: Alloc | None) -> Alloc | None:
    """Make `new_batch` in this thread take its tensors from `alloc`; the one it replaces."""
    before = getattr(_reading, "alloc", None)
    _reading.alloc = alloc
    return before


def new_batch(
    shape: tuple[int, ...], dtype: torch.dtype, pool: BufferPool | None = None, key: str = ""
) -> torch.Tensor:
    """A batch's tensor: from `read_into`'s, in a worker's shared memory, or from `pool`."""
    alloc = getattr(_reading, "alloc", None)
    if alloc is not None:
        return alloc(key, shape, dtype)
    if get_worker_info() is None:
        return pool.get(key, shape, dtype) if pool is not None else torch.empty(shape, dtype=dtype)
    nbytes = int(torch.Size(shape).numel()) * dtype.itemsize
    return torch.empty(0, dtype=dtype).set_(new_shared(nbytes).untyped_storage(), 0, shape)  # type: ignore[call-overload]


def new_shared(nbytes: int) -> torch.Tensor:
    """uint8 over new shared memory, as default_collate's (`share_memory_()`: 6x slower)."""
    return torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(nbytes))


def pinned(key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, pin_memory=True)
