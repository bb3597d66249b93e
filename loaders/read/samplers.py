"""Which samples each rank reads in an epoch: a permutation that depends only on (seed, epoch)
and the shard sizes, of which each rank takes every `num_replicas`-th index. Orders:
"sequential", "random", "blocks" (shuffled blocks of BLOCK_ROWS rows: tables larger than RAM),
"quasi_random" (the shards shuffled, then the samples within each window of `window` shards).

>>> epoch_order([3, 3], "quasi_random", seed=3, epoch=0, window=1).tolist()  # shard 1, then 0
[3, 5, 4, 0, 1, 2]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch.distributed as dist
from torch.utils.data import Sampler

from loaders.remote.prefetch import window_groups, windows

OrderFn = Callable[[np.ndarray, np.random.Generator, int], np.ndarray]


def _quasi_random(sizes: np.ndarray, rng: np.random.Generator, window: int) -> np.ndarray:
    starts = np.concatenate([[0], np.cumsum(sizes)])
    parts = []
    for group in window_groups(rng.permutation(len(sizes)), window):  # first draw: windows()
        idx = np.concatenate([np.arange(starts[s], starts[s + 1]) for s in group])
        parts.append(rng.permutation(idx))
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


BLOCK_ROWS = 4096  # "blocks": a batch of up to this many rows is one or two slices a column


def _blocks(sizes: np.ndarray, rng: np.random.Generator, window: int) -> np.ndarray:
    starts = np.concatenate([[0], np.cumsum(sizes)])
    bounds = [
        (a, min(a + BLOCK_ROWS, int(starts[s + 1])))
        for s in range(len(sizes))
        for a in range(int(starts[s]), int(starts[s + 1]), BLOCK_ROWS)
    ]
    parts = [np.arange(*bounds[b]) for b in rng.permutation(len(bounds))]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


ORDERS: dict[str, OrderFn] = {
    "sequential": lambda sizes, rng, window: np.arange(int(sizes.sum()), dtype=np.int64),
    "random": lambda sizes, rng, window: rng.permutation(int(sizes.sum())).astype(np.int64),
    "quasi_random": _quasi_random,
    "blocks": _blocks,
}


def _check(order: str, window: int) -> None:
    if order not in ORDERS:
        raise ValueError(f"order {order!r} is not one of {', '.join(ORDERS)}")
    if window < 1:
        raise ValueError(f"window {window} must be at least 1 shard")


def epoch_order(
    shard_sizes: Sequence[int], order: str, seed: int, epoch: int, window: int = 8
) -> np.ndarray:
    """Every index of the dataset once, in `order` for (seed, epoch): int64 (sum(shard_sizes),)."""
    _check(order, window)
    rng = np.random.default_rng([seed, epoch])  # same (seed, epoch): same order, any platform
    return ORDERS[order](np.asarray(shard_sizes, dtype=np.int64), rng, window)


def rank_share(order: np.ndarray, rank: int, num_replicas: int, drop_last: bool) -> np.ndarray:
    """Rank `rank`'s indices of an epoch `order`, every `num_replicas`-th from `rank` on; the
    tail that does not divide evenly left out (`drop_last`), else its start repeated.

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
    """This rank's share of each epoch's order. In one process each pass advances the epoch;
    with more ranks only `set_epoch(e)` does (a rank that peeked would read another epoch).
    `num_replicas` and `rank`: torch.distributed's when it is initialised, else 1 and 0.

    Examples:
        >>> from loaders import ShardSampler
        >>> list(ShardSampler([3, 2], order="sequential"))
        [0, 1, 2, 3, 4]
        >>> sorted(ShardSampler([3, 2], order="random", seed=0))
        [0, 1, 2, 3, 4]
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
        _check(order, window)
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
        """Tell a remote dataset the order (it fetches each window ahead: loaders.remote)."""
        store = getattr(dataset, "store", None)
        follow = getattr(getattr(store, "backend", None), "follow", None)
        ours = store is not None and len(store.manifest.shards) == len(self.shard_sizes)
        if follow is not None and ours:
            self.on_window = follow(self.order, self.seed, self.window)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip(self, samples: int) -> None:
        """Start the next pass after the first `samples` of this rank's share, to resume an epoch
        (`set_epoch(e)` first) with the whole pass's order and batches. Later passes are whole."""
        if samples < 0:
            raise ValueError(f"skip({samples}): a count of samples already read, 0 or more")
        self._skip = samples

    def indices(self, epoch: int) -> np.ndarray:  # this rank's, in order
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
        return (int(b[0]) for b in self._announced(share, epoch, 1, len(share)))

    def batches(self, size: int, drop_last: bool) -> Iterator[np.ndarray]:
        """One pass, `size` indices at a time as numpy arrays (iterating, batched)."""
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

    def _announced(
        self, share: np.ndarray, epoch: int, size: int, stop: int
    ) -> Iterator[np.ndarray]:
        """The batches of `share[:stop]`, on_window(epoch, k) called before window k's first."""
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
