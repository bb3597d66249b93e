"""A worker's batches in shared memory it reuses: a SharedRing of segments (fresh shared memory a
batch: page faults cost several times the copy, bench row 4c), each behind a header whose busy
byte the main process clears once `copy_out` has copied the segment out. The segments of workers
shut down stay in the main process (`SPARE`), lent to the next workers it forks."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from loaders.read.buffers import Alloc, Ring, new_shared, read_into, unheld
from loaders.read.workers import Packed

HEADER = 64  # bytes before a segment's data: a multiple of every dtype's size
MAGIC = b"prepring"
BUSY = len(MAGIC)  # offset of the busy byte
OWNER = BUSY + 1  # the id of the worker that wrote it last (its batches: every nth of a pass)


def in_ring(t: torch.Tensor) -> bool:
    """Whether `t` lies in a worker's ring segment already (copy_out copies it)."""
    return _ring_header(t) is not None


def _header(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (HEADER,))  # type: ignore[call-overload]


class SharedRing(Ring[torch.Tensor]):
    """A worker's ring of shared segments (headers), all freed at a new pass (`passes`)."""

    def __init__(
        self,
        keep: int,
        passes: torch.Tensor | None = None,
        lent: Sequence[tuple[int, int]] = (),
        owner: int = 0,
    ):
        super().__init__(keep)
        self.passes, self._pass = passes, -1
        self.lent = list(lent)  # (fd, bytes) of the main process's spare segments, unmapped
        self.owner = owner  # this worker's id

    def get(self, field: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        now = int(self.passes) if self.passes is not None else 0
        if now != self._pass:  # (a first pass: nothing to free)
            self._pass = now
            for head in (h for bufs in self._bufs.values() for h in bufs):
                head[BUSY] = 0
        nbytes = int(torch.Size(shape).numel()) * dtype.itemsize
        head = self.take(self.slots((field, shape, dtype)), _free, lambda: self._made(nbytes))
        head[BUSY], head[OWNER] = 1, self.owner
        out = torch.empty(0, dtype=dtype)
        return out.set_(head.untyped_storage(), HEADER // dtype.itemsize, shape)  # type: ignore[call-overload]

    def _made(self, nbytes: int) -> torch.Tensor:
        """The smallest lent segment of `nbytes` to twice that, mapped (its pages are there:
        only their first faults here), else a new one."""
        fits = [k for k, (_, size) in enumerate(self.lent) if 0 <= size - HEADER - nbytes <= nbytes]
        if not fits:
            return _segment(nbytes)
        fd, size = self.lent.pop(min(fits, key=lambda k: self.lent[k][1]))
        # Maps a dup of fd (which the main process's storage, inherited here, keeps open).
        storage = torch.UntypedStorage._new_shared_fd_cpu(fd, size)  # type: ignore[attr-defined]
        return _header(storage)


def _free(head: torch.Tensor) -> bool:
    """The main process copied the segment out, and this process holds no tensor of it."""
    return int(head[BUSY]) == 0 and unheld(head)


def _segment(nbytes: int) -> torch.Tensor:
    """A new segment of shared memory for `nbytes`, as its header."""
    head = _header(new_shared(HEADER + nbytes).untyped_storage())
    head[:BUSY] = torch.frombuffer(bytearray(MAGIC), dtype=torch.uint8)
    return head


class Spare:
    """The main process's segments of workers that were shut down, copied out: lent to the
    workers it forks next (a fresh loader's: mapping a segment again costs its first page
    faults; a new one costs as much again to make, issue 40). At most `limit` bytes, the newest
    kept; none in a forked process (its parent may lend them)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._heads: list[torch.Tensor] = []
        self._lock = threading.Lock()  # loaders made and dropped in several threads
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._heads, self._lock = [], threading.Lock()

    def lend(self, workers: int) -> list[list[torch.UntypedStorage]]:
        """Every spare segment, for `workers` about to be forked (`keep` takes them back): to
        each the segments of the worker of its id before (it makes batches of the same sizes)."""
        with self._lock:
            heads, self._heads = self._heads, []
        out: list[list[torch.UntypedStorage]] = [[] for _ in range(workers)]
        for head in heads:
            out[int(head[OWNER]) % workers].append(head.untyped_storage())
        return out

    def keep(
        self, pid: int, workers: Iterable[Any], *storages: Iterable[torch.UntypedStorage]
    ) -> None:
        """Take back `storages` of process `pid`, segments of `workers` (processes), once these
        have ended; those not copied out (in flight, or a batch's not found) are let go."""
        if pid != os.getpid() or any(w.is_alive() for w in workers):
            return  # a fork's copy, or not joined yet (a loader in a reference cycle)
        found = {s.data_ptr(): s for group in storages for s in group}  # received again: one
        heads = [h for h in map(_header, found.values()) if int(h[BUSY]) == 0]
        with self._lock:
            self._heads = heads + [h for h in self._heads if h.data_ptr() not in found]
            total = 0
            for k, head in enumerate(self._heads):
                total += head.untyped_storage().nbytes()
                if total > self.limit:
                    del self._heads[k:]
                    break


def spare_limit(most: int = 1 << 30, path: str = "/dev/shm") -> int:
    """What SPARE may keep: `most` bytes, or a quarter of the shared-memory filesystem where it
    is smaller (a container's is often 64 MB: it keeps none of a detection batch's 48 MB)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return min(most, st.f_blocks * st.f_frsize // 4)


SPARE = Spare(limit=spare_limit())


class StartWorker:
    """A picklable `worker_init_fn`: the worker reads into a SharedRing (with the segments
    `lent` to it: (fd, bytes) a segment, valid after a fork), then the user's runs."""

    def __init__(self, keep: int, passes: torch.Tensor, then: Any = None):
        self.keep, self.passes, self.then = keep, passes, then
        self.lent: list[list[tuple[int, int]]] = []  # a list a worker

    def __call__(self, worker_id: int) -> None:
        mine = self.lent[worker_id] if self.lent else []
        self.lent = []
        read_into(SharedRing(self.keep, self.passes, mine, worker_id).get)
        if self.then is not None:
            self.then(worker_id)


def _ring_header(t: torch.Tensor) -> torch.Tensor | None:
    if not t.is_cpu or not t.untyped_storage().is_shared():  # (t.is_shared(): 14 times slower)
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
    if isinstance(x, Packed):  # a batch's small tensors: one segment; the ring's in its shape
        return x.unpack(_copy(x.buf, alloc, copies, heads), _copy(x.shape, alloc, copies, heads))
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
