"""Which samples each rank reads in an epoch: a permutation that depends only on (seed, epoch)
and the shard sizes, of which each rank takes every `num_replicas`-th index. Orders:
"sequential", "random", "blocks" (shuffled blocks of BLOCK_ROWS rows: tables larger than RAM),
"quasi_random" (the shards shuffled, then the samples within each window of `window` shards),
"chunk_random" (quasi_random over blocks rather than shards: a compressed dataset's `chunk_sizes`,
the samples each chunk holds, so a window of `window` chunks is decompressed once an epoch).

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
    "chunk_random": _quasi_random,  # its sizes are blocks (loaders.read.loader: chunk_sizes)
}
WINDOWED = ("quasi_random", "chunk_random")  # the orders that `window` changes


def _check(order: str, window: int) -> None:
    if order not in ORDERS:
        raise ValueError(f"order {order!r} is not one of {', '.join(ORDERS)}")
    if window < 1:
        raise ValueError(f"window {window} must be at least 1 shard or block")


def epoch_order(
    shard_sizes: Sequence[int], order: str, seed: int, epoch: int, window: int = 8
) -> np.ndarray:
    """Every index of the dataset once, in `order` for (seed, epoch): int64 (sum(shard_sizes),)."""
    _check(order, window)
    rng = np.random.default_rng([seed, epoch])  # same (seed, epoch): same order, any platform
    return ORDERS[order](np.asarray(shard_sizes, dtype=np.int64), rng, window)


def rank_share(order: np.ndarray, rank: int, num_replicas: int, drop_last: bool) -> np.ndarray:
    """Rank `rank`'s indices of an epoch `order` (or of its rest, resuming), every
    `num_replicas`-th from `rank` on; the tail that does not divide evenly left out
    (`drop_last`), else its start repeated (so a resumed rest repeats none read before).

    >>> rank_share(np.arange(5), 1, 2, drop_last=False).tolist()
    [1, 3, 0]
    """
    n = len(order)
    total = share_length(n, num_replicas, drop_last) * num_replicas
    if n:  # np.resize repeats the order from its start to fill the padding
        order = order[:total] if drop_last else np.resize(order, total)
    return order[rank:total:num_replicas]


def share_length(n: int, num_replicas: int, drop_last: bool) -> int:
    """Each rank's count of `n` samples: cut (`drop_last`), else padded to one length."""
    return n // num_replicas if drop_last else math.ceil(n / num_replicas)


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
        # A resumed epoch's first global position (loaders.read.state), and how often the
        # epoch was set: a loader tells a pass it counts from a later set_epoch.
        self._cursor, self.sets = 0, 0
        # Called as the sampler starts yielding window k of `epoch` ("quasi_random" only).
        self.on_window: Callable[[int, int], None] | None = None
        # A dataset planned anew each epoch (PackedDataset): its sizes as a pass starts.
        self.start_epoch: Callable[[int], list[int]] | None = None

    def follow(self, dataset: object) -> None:
        """Tell a remote dataset the order (it fetches each window ahead: loaders.remote)."""
        store = getattr(dataset, "store", None)
        follow = getattr(getattr(store, "backend", None), "follow", None)
        ours = store is not None and len(store.manifest.shards) == len(self.shard_sizes)
        if follow is not None and ours:
            self.on_window = follow(self.order, self.seed, self.window)
        self.start_epoch = getattr(dataset, "start_epoch", None)

    def set_epoch(self, epoch: int) -> None:
        """Read `epoch` next: from a resumed position when it is the epoch resumed, else whole."""
        if epoch != self.epoch:
            self._cursor = 0
        self.epoch, self.sets = epoch, self.sets + 1

    def resume(self, epoch: int, position: int) -> None:
        """Start the next pass at global `position` of `epoch`'s order: the rest of the epoch,
        shared among this sampler's ranks (any count) as a whole epoch is. With as many ranks
        as before, each reads the rest of its share, but for the padding."""
        if not 0 <= position <= sum(self.shard_sizes):
            raise ValueError(f"position {position} is not in [0, {sum(self.shard_sizes)}]")
        self.set_epoch(epoch)
        self._cursor, self._skip = position, 0

    def upcoming(self) -> tuple[int, int, int, int]:
        """The next pass's epoch, global start, this rank's skip, and its count of samples."""
        return self.epoch, self._cursor, self._skip, len(self)

    def skip(self, samples: int) -> None:
        """Start the next pass after the first `samples` of this rank's share, to resume an epoch
        (`set_epoch(e)` first) with the whole pass's order and batches. Later passes are whole."""
        if samples < 0:
            raise ValueError(f"skip({samples}): a count of samples already read, 0 or more")
        self._skip = samples

    def indices(self, epoch: int, start: int = 0) -> np.ndarray:  # this rank's, in order
        order = epoch_order(self.shard_sizes, self.order, self.seed, epoch, self.window)
        return rank_share(order[start:], self.rank, self.num_replicas, self.drop_last)

    def _take(self) -> tuple[int, np.ndarray, int]:
        """This pass's epoch, share, and the global position its ranks' shares start at (for
        `_cuts`: a resumed start, then `skip` each); in one process a pass advances the epoch."""
        epoch, skip, start = self.epoch, self._skip, self._cursor
        self._skip = self._cursor = 0
        if self.num_replicas == 1:
            self.epoch += 1
        if self.start_epoch is not None:
            self.shard_sizes = self.start_epoch(epoch)
        return epoch, self.indices(epoch, start)[skip:], start + skip * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        epoch, share, at = self._take()
        if self.on_window is None or self.order != "quasi_random":
            return iter(share.tolist())
        return (int(b[0]) for b in self._announced(share, epoch, at, 1, len(share)))

    def batches(self, size: int, drop_last: bool) -> Iterator[np.ndarray]:
        """One pass, `size` indices at a time as numpy arrays (iterating, batched)."""
        epoch, share, at = self._take()
        stop = len(share) - len(share) % size if drop_last else len(share)
        if self.on_window is None or self.order != "quasi_random":
            return (share[i : i + size] for i in range(0, stop, size))
        return self._announced(share, epoch, at, size, stop)

    def _cuts(self, share: np.ndarray, epoch: int, at: int) -> list[int]:
        """Where in `share` (from global position `at` on) each window of `epoch` starts."""
        sizes = np.asarray(self.shard_sizes, dtype=np.int64)
        groups = windows(len(sizes), self.seed, epoch, self.window)
        starts = np.cumsum([0] + [int(sizes[g].sum()) for g in groups[:-1]])
        # Global position p is this rank's index (p - at - rank) / num_replicas: the first of
        # a window starting at p is the ceil of that (windows begun before `at`: 0).
        firsts = -((self.rank + at - starts) // self.num_replicas)
        return np.clip(firsts, 0, len(share)).tolist()

    def _announced(
        self, share: np.ndarray, epoch: int, at: int, size: int, stop: int
    ) -> Iterator[np.ndarray]:
        """The batches of `share[:stop]`, on_window(epoch, k) called before window k's first."""
        assert self.on_window is not None
        cuts, k = self._cuts(share, epoch, at), 0
        for i in range(0, stop, size):  # (windows wholly skipped: announced at the first batch)
            while k < len(cuts) and cuts[k] < i + size:
                self.on_window(epoch, k)
                k += 1
            yield share[i : i + size]
        for rest in range(k, len(cuts)):  # as iterating reaches them (the batches left out too)
            self.on_window(epoch, rest)

    def __len__(self) -> int:  # of the next pass
        n = sum(self.shard_sizes) - self._cursor
        return max(0, share_length(n, self.num_replicas, self.drop_last) - self._skip)
