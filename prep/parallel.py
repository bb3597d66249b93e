"""Running tasks in parallel (joblib) and showing progress: shared by every long command."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def run_tasks(
    fn: Callable[..., T], args: list[tuple[Any, ...]], n_jobs: int, backend: str = "loky"
) -> Iterator[T]:
    """Run `fn(*a)` for each a on a joblib backend, yielding results as they finish.

    With one job (or one task) everything runs in this process: no pickling, easy to debug."""
    from joblib import Parallel, delayed

    if n_jobs == 1 or len(args) <= 1:
        yield from (fn(*a) for a in args)
        return
    parallel = Parallel(
        n_jobs=min(n_jobs, len(args)), backend=backend, return_as="generator_unordered"
    )
    yield from parallel(delayed(fn)(*a) for a in args)


def progress(total: int, unit: str, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total, unit=unit, desc=desc, dynamic_ncols=True, leave=False, disable=None
    )  # None: off when stderr is not a terminal


class ShardProgress:
    """One bar for a run of shard tasks: items with rate and ETA, and shards done as a postfix."""

    def __init__(self, items: int, shards: int, unit: str, desc: str) -> None:
        self.bar = progress(items, unit, desc)
        self.shards, self.done = shards, 0
        self.bar.set_postfix_str(f"0/{shards} shards", refresh=False)

    def shard_done(self, items: int) -> None:
        """One more shard finished, holding `items` inputs (packed or rejected)."""
        self.done += 1
        self.bar.set_postfix_str(f"{self.done}/{self.shards} shards", refresh=False)
        self.bar.update(items)

    def close(self) -> None:
        self.bar.close()
