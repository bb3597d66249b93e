"""A worker's batches in shared memory it reuses: a SharedRing of segments (fresh shared memory a
batch: page faults cost several times the copy, bench row 4c), each behind a header whose busy
byte the main process clears once `copy_out` has copied the segment out."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch

from loaders.read.buffers import Alloc, Ring, new_shared, read_into, unheld
from loaders.read.workers import Packed

HEADER = 64  # bytes before a segment's data: a multiple of every dtype's size
MAGIC = b"prepring"
BUSY = len(MAGIC)  # offset of the busy byte


def in_ring(t: torch.Tensor) -> bool:
    """Whether `t` lies in a worker's ring segment already (copy_out copies it)."""
    return _ring_header(t) is not None


def _header(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (HEADER,))  # type: ignore[call-overload]


class SharedRing(Ring[torch.Tensor]):
    """A worker's ring of shared segments (headers), all freed at a new pass (`passes`)."""

    def __init__(self, keep: int, passes: torch.Tensor | None = None):
        super().__init__(keep)
        self.passes, self._pass = passes, -1

    def get(self, field: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        now = int(self.passes) if self.passes is not None else 0
        if now != self._pass:  # (a first pass: nothing to free)
            self._pass = now
            for head in (h for bufs in self._bufs.values() for h in bufs):
                head[BUSY] = 0
        nbytes = int(torch.Size(shape).numel()) * dtype.itemsize
        head = self.take(self.slots((field, shape, dtype)), _free, lambda: _segment(nbytes))
        head[BUSY] = 1
        out = torch.empty(0, dtype=dtype)
        return out.set_(head.untyped_storage(), HEADER // dtype.itemsize, shape)  # type: ignore[call-overload]


def _free(head: torch.Tensor) -> bool:
    """The main process copied the segment out, and this process holds no tensor of it."""
    return int(head[BUSY]) == 0 and unheld(head)


def _segment(nbytes: int) -> torch.Tensor:
    """A new segment of shared memory for `nbytes`, as its header."""
    head = _header(new_shared(HEADER + nbytes).untyped_storage())
    head[:BUSY] = torch.frombuffer(bytearray(MAGIC), dtype=torch.uint8)
    return head


class StartWorker:
    """A picklable `worker_init_fn`: the worker reads into a SharedRing, then the user's runs."""

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
    """`data` with every tensor of a worker's ring copied into memory from `alloc`, its segment
    then marked free and kept in `seen` (received again, it maps to the same memory)."""
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
    if isinstance(x, Packed):  # a batch's small tensors: one segment; then the ring's tensors
        return _copy(x.unpack(_copy(x.buf, alloc, copies, heads)), alloc, copies, heads)
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
