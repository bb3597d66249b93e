"""Worker processes that reuse their shared memory (make_loader with num_workers > 0).

torch's worker protocol sends each batch in shared memory, and a worker cannot see when the
main process lets go of one, so every batch gets a fresh segment: faulting its pages in costs
several times the copy of the pixels (bench row 4c). Here each worker keeps a small ring of
segments instead, each with a header (HEADER bytes: MAGIC, then a busy byte). The worker marks a
segment busy when it hands it to a batch. The main process copies every received batch out of
the ring into its own buffers (a BufferPool, or pinned memory for a GPU), then marks the
segment free, so the worker writes it again only once the main process is done with it.

The user never holds a ring segment, so no hold the main process cannot count (a batch sent on
to another process, a storage kept alone) can see it overwritten. The price is one copy per
batch in the main process, into memory that is already faulted in. A batch that the main
process never takes out (one left in flight when a pass is left early and the persistent
workers restart) leaves its segment busy for good: that worker then makes fresh segments past
its ring, as without one.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch

from loaders.read.batches import Alloc, BufferPool, Ring, new_shared, read_into, storage_users

HEADER = 64  # bytes before a segment's data: a multiple of every dtype's size
MAGIC = b"prepring"
BUSY = len(MAGIC)  # offset of the busy byte


def _header(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (HEADER,))  # type: ignore[call-overload]


class SharedRing(Ring[torch.Tensor]):
    """A worker's ring of shared-memory segments, `keep` per (field, shape, dtype).

    `passes` (shared with the main process, which counts its passes over the loader there)
    frees every segment when a new pass starts: a batch left in flight by a pass left early
    is dropped by the main process before it sends the new pass's first indices."""

    def __init__(self, keep: int, passes: torch.Tensor | None = None, shapes: int = 8):
        super().__init__(keep, shapes)  # the segments' headers
        self.passes = passes
        self._pass = self._now()

    def _now(self) -> int:
        return int(self.passes) if self.passes is not None else 0

    def get(self, field: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if self._now() != self._pass:
            self._pass = self._now()
            for head in self.all():
                head[BUSY] = 0
        nbytes = int(torch.Size(shape).numel()) * dtype.itemsize
        slots = self.slots((field, shape, dtype))
        head = self.take(slots, _free, lambda: _segment(nbytes))
        return _hand_out(head, shape, dtype, dtype.itemsize)


def _free(head: torch.Tensor) -> bool:
    """The main process copied the segment out, and this process keeps no tensor of it (2: the
    header's tensor and the storage object made to ask)."""
    return int(head[BUSY]) == 0 and storage_users(head.untyped_storage()._cdata) <= 2


def _segment(nbytes: int) -> torch.Tensor:
    """A new segment of shared memory for `nbytes`, as its header."""
    head = _header(new_shared(HEADER + nbytes))
    head[:BUSY] = torch.frombuffer(bytearray(MAGIC), dtype=torch.uint8)
    return head


def _hand_out(
    head: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype, itemsize: int
) -> torch.Tensor:
    head[BUSY] = 1
    out = torch.empty(0, dtype=dtype)
    return out.set_(head.untyped_storage(), HEADER // itemsize, shape)  # type: ignore[call-overload]


class StartWorker:
    """A DataLoader `worker_init_fn`: the worker's batches come from a SharedRing, then the
    user's own `worker_init_fn` runs. Picklable for spawned workers."""

    def __init__(self, keep: int, passes: torch.Tensor, then: Any = None):
        self.keep, self.passes, self.then = keep, passes, then

    def __call__(self, worker_id: int) -> None:
        read_into(SharedRing(self.keep, self.passes).get)
        if self.then is not None:
            self.then(worker_id)


def _ring_header(t: torch.Tensor) -> torch.Tensor | None:
    if t.device.type != "cpu" or not t.is_shared():
        return None
    storage = t.untyped_storage()
    if storage.nbytes() <= HEADER or t.storage_offset() * t.element_size() < HEADER:
        return None
    head = _header(storage)
    return head if head[:BUSY].numpy().tobytes() == MAGIC else None


def copy_out(data: Any, alloc: Alloc, seen: deque[torch.UntypedStorage]) -> Any:
    """`data` (tensors in tuples, lists and dicts) with every tensor in a worker's ring copied
    into memory from `alloc`, then its segment marked free. The segments are kept in `seen`:
    torch maps a segment received again to the same memory while this process holds it,
    instead of mapping and faulting it in anew."""
    copies: dict[int, torch.Tensor] = {}  # segment address -> its copy (views share one)
    heads: list[torch.Tensor] = []
    result = _copy(data, alloc, copies, heads)
    for head in heads:  # only now: two tensors of one segment are both copied first
        head[BUSY] = 0
        seen.append(head.untyped_storage())
    return result


def _copy(x: Any, alloc: Alloc, copies: dict[int, torch.Tensor], heads: list[torch.Tensor]) -> Any:
    # A function of the module, not a closure: a recursive closure is a reference cycle, which
    # would hold the copies (and so the pool's buffers) until the garbage collector runs.
    if isinstance(x, tuple | list):
        return type(x)(_copy(v, alloc, copies, heads) for v in x)
    if isinstance(x, dict):
        return {k: _copy(v, alloc, copies, heads) for k, v in x.items()}
    head = _ring_header(x) if isinstance(x, torch.Tensor) else None
    if head is None:
        return x
    src = x.untyped_storage()
    flat = copies.get(src.data_ptr())
    if flat is None:
        whole = torch.empty(0, dtype=torch.uint8).set_(src)
        flat = copies[src.data_ptr()] = alloc("worker", (src.nbytes() - HEADER,), torch.uint8)
        np.copyto(flat.numpy(), whole.numpy()[HEADER:])  # a memcpy: twice torch's copy_ here
        heads.append(head)
    offset = x.storage_offset() - HEADER // x.element_size()
    out = torch.empty(0, dtype=x.dtype)
    return out.set_(flat.untyped_storage(), offset, x.shape, x.stride())


class CopyOut:
    """The main process's side: each batch from the DataLoader's iterator, copied out of the
    workers' rings (pinned for a GPU, else into `pool`); `seen` (see copy_out) lasts as long as
    the workers do, across passes."""

    def __init__(self, batches: Any, pool: BufferPool, pin: bool, seen: deque[Any]):
        self._batches, self._alloc, self._seen = batches, pinned if pin else pool.get, seen

    def __iter__(self) -> CopyOut:
        return self

    def __next__(self) -> Any:
        return copy_out(next(self._batches), self._alloc, self._seen)

    def __len__(self) -> int:
        return len(self._batches)


def pinned(key: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, pin_memory=True)
