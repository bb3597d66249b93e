"""A worker's batches in shared memory it reuses: a SharedRing of segments (fresh shared memory a
batch: page faults cost several times the copy, bench row 4c), each behind a header whose busy
byte says who has it: the worker (in flight), the caller (the main process hands the batch out
without a copy, `Segments`, and frees the segment once nothing refers to it), or another process
(sent on: never written again). The segments of workers shut down stay in the main process
(`SPARE`), lent to the next workers it forks."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch
from torch.multiprocessing.reductions import reduce_storage

from loaders.read.buffers import Alloc, Ring, new_shared, read_into, unheld
from loaders.read.workers import Packed

HEADER = 64  # bytes before a segment's data: a multiple of every dtype's size
MAGIC = b"prepring"
BUSY = len(MAGIC)  # offset of the busy byte: 0 free, then one of these
SENT, HELD, GIVEN = 1, 2, 3  # made by the worker; handed out; sent on to another process
OWNER = BUSY + 1  # the id of the worker that wrote it last (its batches: every nth of a pass)


def in_ring(t: torch.Tensor) -> bool:
    """Whether `t` lies in a worker's ring segment already (`pack` leaves it where it is)."""
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
                if int(head[BUSY]) == SENT:  # a batch of the pass before, dropped unread
                    head[BUSY] = 0
        nbytes = int(torch.Size(shape).numel()) * dtype.itemsize
        head = self.take(self.slots((field, shape, dtype)), _free, lambda: self._made(nbytes))
        head[BUSY], head[OWNER] = SENT, self.owner
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
        _map_ahead(storage)
        return _header(storage)


FAULT_AROUND = 1 << 16  # the kernel's fault_around_bytes (its default)


def _map_ahead(storage: torch.UntypedStorage) -> None:
    """A byte read every 64 KiB of a mapped segment whose pages exist: each read's fault maps
    its 16 pages at once (the kernel's fault-around), writable, as a shared mapping's are;
    written, each page would fault alone. A lent 50 MB segment's first write: 12,800 faults
    and 15 ms, or 800 and 6.5 ms with this."""
    torch.empty(0, dtype=torch.uint8).set_(storage)[::FAULT_AROUND].sum()


def _free(head: torch.Tensor) -> bool:
    """The main process let the segment go, and this process holds no tensor of it."""
    return int(head[BUSY]) == 0 and unheld(head)


def _segment(nbytes: int) -> torch.Tensor:
    """A new segment of shared memory for `nbytes`, as its header."""
    head = _header(new_shared(HEADER + nbytes).untyped_storage())
    head[:BUSY] = torch.frombuffer(bytearray(MAGIC), dtype=torch.uint8)
    return head


class Spare:
    """The main process's segments of workers that were shut down, let go: lent to the
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
            heads = [h for h in self._heads if _let_go(h)]
            self._heads = [h for h in self._heads if int(h[BUSY]) == HELD]  # still the caller's
        out: list[list[torch.UntypedStorage]] = [[] for _ in range(workers)]
        for head in heads:
            out[int(head[OWNER]) % workers].append(head.untyped_storage())
        return out

    def keep(self, pid: int, workers: Iterable[Any], segments: Segments) -> None:
        """Take back the `segments` of a loader of process `pid` once its `workers` (processes)
        have ended: those free, and those the caller still holds (its last batch: lent once it
        lets go); those in flight are let go."""
        if pid != os.getpid() or any(w.is_alive() for w in workers):
            return  # a fork's copy, or not joined yet (a loader in a reference cycle)
        segments.let_go()
        found = {s.data_ptr(): s for s in segments}
        heads = [h for h in map(_header, found.values()) if int(h[BUSY]) in (0, HELD)]
        segments.drop()  # one header a segment, ours: how `_let_go` sees the caller's hold
        with self._lock:
            self._heads = heads + [h for h in self._heads if h.data_ptr() not in found]
            total = 0
            for k, head in enumerate(self._heads):
                total += head.untyped_storage().nbytes()
                if total > self.limit:
                    del self._heads[k:]
                    break

    def give(self, storage: torch.UntypedStorage) -> None:
        """`storage` is sent to another process: a segment kept while its caller held it is
        theirs for good (Segments.give)."""
        with self._lock:
            ptr = storage.data_ptr()
            self._heads = [h for h in self._heads if h.data_ptr() != ptr]


def _let_go(head: torch.Tensor) -> bool:
    """Whether a segment is free: one the caller held is, once nothing else refers to it."""
    if int(head[BUSY]) == HELD and unheld(head):
        head[BUSY] = 0
    return int(head[BUSY]) == 0


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


class Segments:
    """The worker segments a loader's batches lie in, as the main process maps them (a header
    each, which keeps the mapping: a segment received again maps to the same memory), oldest
    first, at most `most`; those handed out HELD until nothing but this refers to them."""

    def __init__(self, most: int):
        self.most = most
        self._heads: dict[int, torch.Tensor] = {}  # segment address -> its header
        self._held: list[torch.Tensor] = []
        with _LOCK:
            _LIVE.add(self)

    def __iter__(self) -> Iterator[torch.UntypedStorage]:
        return iter([h.untyped_storage() for h in self._heads.values()])

    def hand_out(self, data: Any, alloc: Alloc | None = None) -> Any:
        """`data` for the caller: its ring tensors as they are, their segments HELD; or with
        `alloc` (pinned memory for a GPU) copied out, their segments free at once."""
        copies: dict[int, torch.Tensor] = {}  # segment address -> its copy (views share one)
        heads: dict[int, torch.Tensor] = {}
        result = _out(data, alloc, copies, heads)
        with _LOCK:
            for ptr, head in heads.items():  # only now: two tensors of one segment both copied
                head = self._heads.setdefault(ptr, head)
                head[BUSY] = HELD if alloc is None else 0
                if alloc is None:
                    self._held.append(head)
            self._forget()
        return result

    def adopt(self, storages: Iterable[torch.UntypedStorage]) -> None:
        """Know `storages` (the spare segments lent to this loader's workers) as these."""
        for storage in storages:
            self._heads.setdefault(storage.data_ptr(), _header(storage))

    def give(self, storage: torch.UntypedStorage) -> None:
        """`storage` is sent to another process, whose hold this cannot see: if it is a segment
        handed out, it is never freed (its worker makes another)."""
        head = self._heads.get(storage.data_ptr())
        if head is not None and int(head[BUSY]) == HELD:
            head[BUSY] = GIVEN

    def let_go(self) -> None:
        """Free the segments handed out that nothing refers to any more (the caller's batch,
        its views, a numpy array of it: each holds the storage); under the lock that `give`,
        in a queue's feeder thread, is called under."""
        with _LOCK:  # those sent on (GIVEN) drop out too
            self._held = [h for h in self._held if int(h[BUSY]) == HELD and not _let_go(h)]

    def drop(self) -> None:
        """Refer to no segment any more (their workers are gone: SPARE took them)."""
        with _LOCK:
            self._heads, self._held = {}, []

    def _forget(self) -> None:
        """The oldest segments past `most` unmapped, but those handed out."""
        for ptr in [p for p, h in self._heads.items() if int(h[BUSY]) != HELD]:
            if len(self._heads) <= self.most:
                break
            del self._heads[ptr]


_LIVE: weakref.WeakSet[Segments] = weakref.WeakSet()  # this process's, for _sent_on
_LOCK = threading.Lock()


def _forget_parent() -> None:
    """In a forked child: its parent's loaders are not its own."""
    global _LIVE, _LOCK
    _LIVE, _LOCK = weakref.WeakSet(), threading.Lock()


os.register_at_fork(after_in_child=_forget_parent)


def _sent_on(storage: torch.UntypedStorage) -> Any:
    """torch's reduction of a storage sent to another process, which first tells the loaders
    of this process (a segment handed out is then theirs for good)."""
    if storage.device.type == "cpu":
        with _LOCK:
            for segments in list(_LIVE):
                segments.give(storage)
        SPARE.give(storage)
    return reduce_storage(storage)


ForkingPickler.register(torch.UntypedStorage, _sent_on)


def _out(x: Any, alloc: Alloc | None, copies: dict[int, Any], heads: dict[int, Any]) -> Any:
    # A function of the module, not a closure: a recursive closure is a reference cycle, which
    # would hold the copies (and so the pool's buffers) until the garbage collector runs.
    if isinstance(x, tuple | list):
        return type(x)(_out(v, alloc, copies, heads) for v in x)
    if isinstance(x, dict):
        return {k: _out(v, alloc, copies, heads) for k, v in x.items()}
    if isinstance(x, Packed):  # a batch's small tensors: one segment; the ring's in its shape
        return x.unpack(_out(x.buf, alloc, copies, heads), _out(x.shape, alloc, copies, heads))
    head = _ring_header(x) if isinstance(x, torch.Tensor) else None
    if head is None:
        return x
    src = x.untyped_storage()
    heads.setdefault(src.data_ptr(), head)
    if alloc is None:
        return x
    flat = copies.get(src.data_ptr())
    if flat is None:
        whole = torch.empty(0, dtype=torch.uint8).set_(src)
        flat = copies[src.data_ptr()] = alloc("worker", (src.nbytes() - HEADER,), torch.uint8)
        np.copyto(flat.numpy(), whole.numpy()[HEADER:])  # a memcpy: twice torch's copy_ here
    offset = x.storage_offset() - HEADER // x.element_size()
    out = torch.empty(0, dtype=x.dtype)
    return out.set_(flat.untyped_storage(), offset, x.shape, x.stride())
