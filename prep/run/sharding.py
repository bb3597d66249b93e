"""How a run cuts its inputs into shards: the default shard size (`shard_size`), each split's
inputs cut by count (`split_shards`), or consecutive inputs grouped by size (`grouped`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")
# The default shard size: AUTO_SHARDS tasks keep 2-16 cores busy to the end (the costliest run
# first); AUTO_MIN keeps a shard's fixed cost (a few files and fsyncs) small beside its work.
AUTO_SHARDS, AUTO_MIN, AUTO_MAX = 32, 16, 1000


def shard_size(count: int, chosen: int | None) -> int:
    """Samples per shard: `chosen`, else from the input count alone (never --jobs: same bytes).

    >>> [shard_size(n, None) for n in (24, 180, 720, 2000, 10**6)], shard_size(180, 50)
    ([16, 16, 23, 63, 1000], 50)
    """
    if chosen is not None:
        return chosen
    return min(AUTO_MAX, max(AUTO_MIN, -(-count // AUTO_SHARDS)))


def split_shards(items: list[T], splits: list[Any], chosen: int | None) -> list[list[T]]:
    """Each split's items (`.split`, in `splits` order) cut into shards of shard_size."""
    size = shard_size(len(items), chosen)
    shards = []
    for split in splits:  # a shard holds one split's inputs
        part = [it for it in items if getattr(it, "split", None) == split]
        shards += [part[i : i + size] for i in range(0, len(part), size)]
    return shards


def grouped(items: Iterable[T], size: Callable[[T], int], limit: int) -> list[list[T]]:
    """Consecutive items grouped until a group's sizes sum to `limit` (the last may hold less)."""
    groups: list[list[T]] = [[]]
    total = 0
    for it in items:
        groups[-1].append(it)
        total += size(it)
        if total >= limit:
            groups.append([])
            total = 0
    return [g for g in groups if g]
