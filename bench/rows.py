"""What a bench row is, and how a bench module times a command: each bench/bench_*.py imports
these (bench.py, the script, imports those modules)."""

from __future__ import annotations

import operator
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PREP = [str(Path(sys.executable).parent / "prep")]  # the installed console script


@dataclass
class Row:
    name: str
    ours: float
    ref: float
    unit: str
    goal: str
    met: bool | None

    @property
    def ratio(self) -> float:
        return self.ours / self.ref if self.ref else float("nan")


GOALS = {">=": operator.ge, "<=": operator.le, "<": operator.lt, ">": operator.gt}


def versus(name: str, ours: float, ref: float, unit: str, goal: str) -> Row:
    """A row whose goal is a ratio of ours to ref, e.g. ">= 3x": met when the ratio meets it
    (not met when ref is 0: a smoke run's CPU time under the clock's 10 ms tick)."""
    op, target = goal.split()
    ratio = ours / ref if ref else float("nan")  # nan meets no goal
    return Row(name, ours, ref, unit, goal, GOALS[op](ratio, float(target.rstrip("x"))))


def info(name: str, ours: float, ref: float, unit: str, note: str) -> Row:
    return Row(name, ours, ref, unit, note, None)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=True, text=True, capture_output=True, **kw)


def prep(*args: str) -> float:
    """Seconds for one `prep` command, run as a user runs it (a fresh process)."""
    return timed(lambda: run([*PREP, *args, "-q"]))


def child_peak_rss_mb(args: list[str]) -> float:
    """Peak RSS of a child process (MB), from the kernel's accounting of that child alone."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{args} failed: {proc.stderr.read() if proc.stderr else ''}")
    return usage.ru_maxrss / 1024


# ------------------------------------------------------------------------------ measures
