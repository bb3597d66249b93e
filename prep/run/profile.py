"""Where the time goes: a per-stage timer each shard task fills and the parent sums. Stages are
exclusive (a nested stage's time is its own); with no timer active `stage` costs a lookup.

>>> t = StageTimer()
>>> with t.stage("decode"):
...     with t.stage("read"):
...         pass
>>> sorted(t.seconds)
['decode', 'read']
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

# The pipeline's stages in the order a sample meets them; a table lists these first.
IMAGE_STAGES = ("list", "read", "decode", "resize", "write", "checksum")
TEXT_STAGES = ("list", "fit", "read", "tokenize", "write", "checksum")
OTHER = "other"

_ACTIVE: ContextVar[StageTimer | None] = ContextVar("prep_stage_timer", default=None)


class StageTimer:
    """Seconds per stage name, exclusive of nested stages."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._open: list[list[Any]] = []  # [name, start of its current slice] per open stage

    def _charge(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        now = time.perf_counter()
        if self._open:  # pause the enclosing stage
            outer = self._open[-1]
            self._charge(outer[0], now - outer[1])
        self._open.append([name, now])
        try:
            yield
        finally:
            end = time.perf_counter()
            _, start = self._open.pop()
            self._charge(name, end - start)
            if self._open:
                self._open[-1][1] = end  # resume the enclosing stage

    @contextmanager
    def active(self) -> Iterator[StageTimer]:
        """Make this the timer that `stage` and `timed` report to."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)

    def add(self, seconds: Mapping[str, float]) -> None:
        """Sum another timer's seconds (a worker's record) into this one."""
        for name, s in seconds.items():
            self._charge(name, float(s))


def stage(name: str) -> AbstractContextManager[None]:
    """Time the block as `name` on the active timer; a no-op when none is active."""
    timer = _ACTIVE.get()
    return timer.stage(name) if timer is not None else nullcontext()


def timed(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator: every call of the function is timed as stage `name`."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with stage(name):
                return fn(*args, **kwargs)

        return wrapper

    return decorate


def timed_iter(name: str, items: Iterable[T]) -> Iterator[T]:
    """`items`, the work of making each (a generator's) timed as stage `name`."""
    it = iter(items)
    while True:
        with stage(name):
            try:
                item = next(it)
            except StopIteration:
                return
        yield item


def run_profiled(enabled: bool, task: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """`task(*args)`'s record, with "stages" (seconds by name; unclaimed: "other") if `enabled`."""
    if not enabled:
        return task(*args)
    timer = StageTimer()
    with timer.active(), timer.stage(OTHER):
        record = task(*args)
    return {**record, "stages": timer.seconds}


def shares(seconds: Mapping[str, float]) -> dict[str, float]:
    """Each stage's percentage of the total."""
    total = sum(seconds.values())
    return {name: 100.0 * s / total if total else 0.0 for name, s in seconds.items()}


def profile_table(
    seconds: Mapping[str, float], order: tuple[str, ...] = IMAGE_STAGES, workers: int = 1
) -> str:
    """Seconds and share per stage: `order`'s first, then the others, "other" last; the total."""
    names = [n for n in order if n in seconds]
    names += sorted(n for n in seconds if n not in order and n != OTHER)
    names += [OTHER] if OTHER in seconds else []
    pct = shares(seconds)
    total = sum(seconds.values())
    lines = [f"{'stage':<10}{'seconds':>10}{'share':>9}"]
    lines += [f"{n:<10}{seconds[n]:>10.2f}{pct[n]:>8.1f}%" for n in names]
    lines.append(
        f"{'total':<10}{total:>10.2f}{100.0 if total else 0.0:>8.1f}%"
        f"  (summed over {workers} worker{'s' if workers != 1 else ''})"
    )
    return "\n".join(lines)
