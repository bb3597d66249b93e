"""make_loader: a DataLoader that keeps the datasets' batched reads. Without worker processes,
threads read ahead while the step runs (the copies release the GIL) into reused buffers
(`new_batch`); workers read into SharedRings of segments (fresh shared memory a batch: page
faults cost several times the copy, bench row 4c), each behind a header the main process clears."""

from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, get_worker_info
from torch.utils.data._utils.collate import default_collate
from torch.utils.data._utils.fetch import _MapDatasetFetcher
from torch.utils.data._utils.pin_memory import pin_memory

from loaders.read import state
from loaders.read.samplers import ShardSampler
from loaders.read.workers import Packed, PackInWorker, capped

T = TypeVar("T")
Alloc = Callable[[str, tuple[int, ...], torch.dtype], torch.Tensor]
HEADER = 64  # bytes before a segment's data: a multiple of every dtype's size
MAGIC = b"prepring"
BUSY = len(MAGIC)  # offset of the busy byte
# How many tensors share a storage (a private torch function; without it buffers are not reused).
_storage_users = getattr(torch._C, "_storage_Use_Count", None)


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


def _unheld(t: torch.Tensor) -> bool:
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
            buf = self.take(bufs, _unheld, lambda: torch.empty(shape, dtype=dtype))
            return buf.view(shape)  # a new view: the caller's hold is counted


# Where this thread's `new_batch` takes its tensors (a thread outside the loader: its pool)
_reading = threading.local()


def current_alloc() -> Alloc | None:
    """What `new_batch` in this thread takes its tensors from (a worker: its SharedRing)."""
    return getattr(_reading, "alloc", None)


def in_ring(t: torch.Tensor) -> bool:
    """Whether `t` lies in a worker's ring segment already (copy_out copies it)."""
    return _ring_header(t) is not None


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
    return int(head[BUSY]) == 0 and _unheld(head)


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
    if isinstance(x, Packed):  # a batch's small tensors: one segment, copied with the rest
        return x.unpack(_copy(x.buf, alloc, copies, heads))
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
    window: int = 8,
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
    `drop_last`) to one length.

    Examples:
        >>> from loaders import ImageShardDataset, make_loader
        >>> ds = ImageShardDataset("data/demo-packed", size=128)
        >>> loader = make_loader(ds, batch_size=16, shuffle=True, seed=0)
        >>> images, labels = next(iter(loader))
        >>> images.shape, labels.dtype
        (torch.Size([16, 3, 128, 128]), torch.int64)
    """
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
    num_workers = capped(num_workers)
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
    own = {"sampler", "batch_sampler"} & dataloader_kwargs.keys()
    if own and (distributed or order != "sequential"):
        raise ValueError("a sampler of your own replaces order=/distributed=: pass one")
    if not own and not isinstance(dataset, IterableDataset):  # (its state: loaders.read.state)
        sizes = getattr(dataset, "shard_sizes", None)
        if sizes is None and order == "quasi_random":
            raise ValueError(
                f"{type(dataset).__name__} has no shard_sizes, which order='quasi_random' "
                "needs; use order='random'"
            )
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
        kwargs["sampler"] = sampler
        shuffle = False  # the sampler orders
    kwargs.update(dataloader_kwargs)
    threads = (getattr(dataset, "read_threads", None) or THREADS) if threads is None else threads
    return Loader(dataset, batch_size=batch_size, shuffle=shuffle, threads=threads, **kwargs)


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
            if kw.get("collate_fn") is not None:  # (None: DataLoader's choice, kept)
                kw["collate_fn"] = PackInWorker(kw["collate_fn"], current_alloc, in_ring)
            self.seen: deque[Any] = deque(maxlen=4 * workers * keep)
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
            batches = _read_ahead(self)
        elif not self.shares:
            batches = super().__iter__()
        else:
            self.passes += 1  # before the workers are reset: see SharedRing
            alloc = pinned if self.pins else self.ring.get  # pinned for a GPU
            batches = (copy_out(b, alloc, self.seen) for b in super().__iter__())
        return batches if now is None else state.counted(batches, now)

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
