"""Small helpers several test files share (imported as `helpers`: tests/ is on sys.path)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


@contextmanager
def no_hang(seconds: int = 60) -> Iterator[None]:
    """Fail instead of blocking forever (a FIFO opened for reading waits for a writer)."""

    def fail(signum: int, frame: Any) -> None:
        raise TimeoutError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def group_gone(pgid: int, limit_s: float = 60) -> bool:
    """Whether every process of group `pgid` has ended within `limit_s` seconds."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def brute_force(a: np.ndarray, b: np.ndarray, d: int, chunk: int = 2048) -> np.ndarray:
    """The reference: every pair of `a` x `b` compared (XOR, popcount), a chunk at a time."""
    out = []
    for s in range(0, len(a), chunk):
        dist = np.bitwise_count(a[s : s + chunk, None] ^ b[None, :])
        i, j = np.nonzero(dist <= d)
        out.append(np.stack([i + s, j, dist[i, j].astype(np.int64)], axis=1))
    return np.concatenate(out) if out else np.zeros((0, 3), dtype=np.int64)
