"""Which samples each rank reads in an epoch, and in what order.

An epoch's order is a permutation of the whole dataset that depends only on (seed, epoch) and the
shard sizes: never on the rank count, the DataLoader worker count or the process. Each rank then
takes every `num_replicas`-th index of it, as torch's DistributedSampler does, so the ranks'
shares are disjoint, cover the epoch, and have the same length (the last batches line up in DDP).

Orders:

- "sequential": the dataset's order.
- "random": a full shuffle.
- "blocks": shuffled blocks of BLOCK_ROWS consecutive rows (tables larger than RAM: a batch
  is one or two contiguous slices per column).
- "quasi_random": shuffle the shards, then the samples within each window of `window` shards.
  A dataset larger than RAM is then read `window` shards at a time instead of randomly across
  the whole disk. A batch mixes only the classes of those shards: when the inputs were packed
  sorted by class (one class per shard), a batch holds about `window` classes.

>>> epoch_order([3, 3], "quasi_random", seed=3, epoch=0, window=1).tolist()  # shard 1, then 0
[3, 5, 4, 0, 1, 2]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch.distributed as dist
from torch.utils.data import Sampler

OrderFn = Callable[[np.ndarray, np.random.Generator, int], np.ndarray]


def _sequential(sizes: np.ndarray, rng: np.random.Generator, window: int) -> np.ndarray:
    return np.arange(int(sizes.sum()), dtype=np.int64)


def _random(sizes: np.ndarray, rng: np.random.Generator, window: int) -> np.ndarray:
    return rng.permutation(int(sizes.sum())).astype(np.int64)


def _windows(shards: np.ndarray, window: int) -> list[np.ndarray]:
    return [shards[w : w + window] for w in range(0, len(shards), window)]


def _quasi_random(sizes: np.ndarray, rng: np.random.Generator, window: int) -> np.ndarray:
    starts = np.concatenate([[0], np.cumsum(sizes)])
    parts = []
    for group in _windows(rng.permutation(len(sizes)), window):  # the first draw: see windows()
        idx = np.concatenate([np.arange(starts[s], starts[s + 1]) for s in group])
        parts.append(rng.permutation(idx))
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def windows(num_shards: int, seed: int, epoch: int, window: int = 8) -> list[np.ndarray]:
    """The shards of each window of epoch `epoch` in order "quasi_random", in reading order:
    what a remote dataset prefetches (loaders.remote.prefetch).

    >>> [w.tolist() for w in windows(3, seed=3, epoch=0, window=2)]
    [[2, 1], [0]]
    """
    rng = np.random.default_rng([seed, epoch])  # as epoch_order: its first draw is the shards'
    return _windows(rng.permutation(num_shards), window)


BLOCK_ROWS = 4096  # "blocks": a batch of up to this many rows is one or two slices a column


def _blocks(sizes: np.ndarray, rng: np.random.Generator, window: int) -> np.ndarray:
    """Each shard cut into blocks of BLOCK_ROWS consecutive indices; the blocks shuffled."""
    starts = np.concatenate([[0], np.cumsum(sizes)])
    bounds = [
        (a, min(a + BLOCK_ROWS, int(starts[s + 1])))
        for s in range(len(sizes))
        for a in range(int(starts[s]), int(starts[s + 1]), BLOCK_ROWS)
    ]
    parts = [np.arange(*bounds[b]) for b in rng.permutation(len(bounds))]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


ORDERS: dict[str, OrderFn] = {
    "sequential": _sequential,
    "random": _random,
    "quasi_random": _quasi_random,
    "blocks": _blocks,
}


def epoch_order(
    shard_sizes: Sequence[int], order: str, seed: int, epoch: int, window: int = 8
) -> np.ndarray:
    """Every index of the dataset once, in `order` for (seed, epoch): int64 (sum(shard_sizes),)."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r} is not one of {', '.join(ORDERS)}")
    if window < 1:
        raise ValueError(f"window {window} must be at least 1 shard")
    rng = np.random.default_rng([seed, epoch])  # same (seed, epoch): same order, any platform
    return ORDERS[order](np.asarray(shard_sizes, dtype=np.int64), rng, window)


def rank_share(order: np.ndarray, rank: int, num_replicas: int, drop_last: bool) -> np.ndarray:
    """Rank `rank`'s indices of an epoch `order`, every `num_replicas`-th from `rank` on.

    All ranks get the same count: with `drop_last` the tail that does not divide evenly is left
    out of this epoch (len(order) // num_replicas each); without, the order is padded by repeating
    its start (ceil(len(order) / num_replicas) each, a few samples seen twice), as torch's
    DistributedSampler does.

    >>> rank_share(np.arange(5), 1, 2, drop_last=False).tolist()
    [1, 3, 0]
    """
    n = len(order)
    per_rank = n // num_replicas if drop_last else math.ceil(n / num_replicas)
    total = per_rank * num_replicas
    if n:  # np.resize repeats the order from its start to fill the padding
        order = order[:total] if drop_last else np.resize(order, total)
    return order[rank:total:num_replicas]


class ShardSampler(Sampler[int]):
    """This rank's share of each epoch's order (see the module docstring); yields indices.

    In one process every pass over the sampler advances the epoch by one, so each epoch has its
    own order without a call. With more than one rank the epoch changes only by `set_epoch(e)`,
    as with DistributedSampler: call it every epoch on every rank. A rank that iterated once more
    than the others (a peek at a batch) would otherwise read another epoch's order than they do,
    and the shares would overlap. The order is computed here, in the
    main process, so DataLoader workers never change it.

    `num_replicas` and `rank` default to torch.distributed's when it is initialised, else 1 and 0.
    """

    def __init__(
        self,
        shard_sizes: Sequence[int],
        order: str = "random",
        seed: int = 0,
        window: int = 8,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
    ):
        if order not in ORDERS:
            raise ValueError(f"order {order!r} is not one of {', '.join(ORDERS)}")
        if window < 1:
            raise ValueError(f"window {window} must be at least 1 shard")
        ddp = dist.is_available() and dist.is_initialized()
        self.num_replicas = num_replicas or (dist.get_world_size() if ddp else 1)
        self.rank = rank if rank is not None else (dist.get_rank() if ddp else 0)
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank {self.rank} is not in [0, {self.num_replicas})")
        self.shard_sizes = [int(s) for s in shard_sizes]
        self.order, self.seed, self.window, self.drop_last = order, seed, window, drop_last
        self.epoch, self._skip = 0, 0
        # Called as the sampler starts yielding window k of `epoch` ("quasi_random" only).
        self.on_window: Callable[[int, int], None] | None = None

    def follow(self, dataset: object) -> None:
        """Tell a remote dataset the order: for "quasi_random" it fetches each window's shards
        ahead of the reading and keeps the windows being read out of its cache's eviction
        (loaders.remote.prefetch); for any order it warns if its cache_limit is too small for
        it. make_loader calls it; a local dataset ignores it."""
        store = getattr(dataset, "store", None)
        follow = getattr(getattr(store, "backend", None), "follow", None)
        ours = store is not None and len(store.manifest.shards) == len(self.shard_sizes)
        if follow is not None and ours:
            self.on_window = follow(self.order, self.seed, self.window)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip(self, samples: int) -> None:
        """Start the next pass after the first `samples` indices of this rank's share: to resume
        an epoch where a run stopped (`set_epoch(e)` first; `samples` is what this rank read of
        it, batches done x batch size). The pass then yields what the whole one would have after
        them: the same order and batches, and with loaders.transforms the same augmentations
        (drawn from each sample's index). Later passes are whole."""
        if samples < 0:
            raise ValueError(f"skip({samples}): a count of samples already read, 0 or more")
        self._skip = samples

    def indices(self, epoch: int) -> np.ndarray:
        """This rank's indices of `epoch`, in order."""
        order = epoch_order(self.shard_sizes, self.order, self.seed, epoch, self.window)
        return rank_share(order, self.rank, self.num_replicas, self.drop_last)

    def _take(self) -> tuple[int, np.ndarray]:
        """This pass's epoch and share; in one process each pass advances the epoch."""
        epoch, skip, self._skip = self.epoch, self._skip, 0
        if self.num_replicas == 1:
            self.epoch += 1
        return epoch, self.indices(epoch)[skip:]

    def __iter__(self) -> Iterator[int]:
        epoch, share = self._take()
        if self.on_window is None or self.order != "quasi_random":
            return iter(share.tolist())
        return self._by_window(share, epoch)

    def batches(self, size: int, drop_last: bool) -> Iterator[np.ndarray]:
        """One pass, `size` indices at a time, as numpy arrays: what iterating the sampler and
        batching gives (the epoch and the windows' announcements alike), without a Python int
        per index."""
        epoch, share = self._take()
        stop = len(share) - len(share) % size if drop_last else len(share)
        if self.on_window is None or self.order != "quasi_random":
            return (share[i : i + size] for i in range(0, stop, size))
        return self._announced(share, epoch, size, stop)

    def _cuts(self, share: np.ndarray, epoch: int) -> list[int]:
        """Where in `share` each window of `epoch` starts."""
        sizes = np.asarray(self.shard_sizes, dtype=np.int64)
        groups = windows(len(sizes), self.seed, epoch, self.window)
        starts = np.cumsum([0] + [int(sizes[g].sum()) for g in groups[:-1]])
        # Global position p is this rank's index (p - rank) / num_replicas: the first of a
        # window starting at p is ceil((p - rank) / num_replicas); a skipped start shifts them.
        firsts = -((self.rank - starts) // self.num_replicas) - (self._full() - len(share))
        return np.clip(firsts, 0, len(share)).tolist()

    def _by_window(self, share: np.ndarray, epoch: int) -> Iterator[int]:
        """`share`, calling on_window(epoch, k) before the first index of window k."""
        assert self.on_window is not None
        cuts = self._cuts(share, epoch)
        for k, (a, b) in enumerate(zip(cuts, [*cuts[1:], len(share)], strict=True)):
            self.on_window(epoch, k)
            yield from share[a:b].tolist()

    def _announced(
        self, share: np.ndarray, epoch: int, size: int, stop: int
    ) -> Iterator[np.ndarray]:
        """The batches of `share[:stop]`, each window announced before its first batch."""
        assert self.on_window is not None
        cuts, k = self._cuts(share, epoch), 0
        for i in range(0, stop, size):  # (windows wholly skipped: announced at the first batch)
            while k < len(cuts) and cuts[k] < i + size:
                self.on_window(epoch, k)
                k += 1
            yield share[i : i + size]
        for rest in range(k, len(cuts)):  # as iterating reaches them (the batches left out too)
            self.on_window(epoch, rest)

    def _full(self) -> int:  # the length of a share before a skip (every epoch's)
        n = sum(self.shard_sizes)
        return n // self.num_replicas if self.drop_last else math.ceil(n / self.num_replicas)

    def __len__(self) -> int:  # of the next pass
        return max(0, self._full() - self._skip)
