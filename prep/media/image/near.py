"""All pairs of 64-bit hashes within a Hamming distance `d`, well under quadratic time. Two such
hashes cut in `m` blocks agree on t = m - d; per choice of t blocks (a table) only hashes with
equal keys are compared. "mih": m = d + 1, t = 1; "tables" (Manku et al., WWW 2007): t >= 2;
"auto": the least modelled cost (docs/looking.md, "Near-duplicates and leakage").

>>> h = np.array([0, 0b111, 3 << 62, 0b1], dtype=np.uint64)
>>> near_pairs(h, max_distance=1).tolist()
[[0, 3, 1]]
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator

import numpy as np

DEFAULT_DISTANCE = 4  # bits of 64

SORT_NS, PAIR_NS = 60.0, 12.0  # ns per element sorted, per candidate pair compared (measured)
BITS = 64
THREADED = 100_000  # hashes from which the tables run on threads


def blocks(m: int) -> list[tuple[int, int]]:
    """(shift, width) of m contiguous blocks covering 64 bits, widths differing by at most one.

    >>> blocks(3)
    [(42, 22), (21, 21), (0, 21)]
    """
    widths = [BITS // m + (1 if i < BITS % m else 0) for i in range(m)]
    ends = np.cumsum(widths)
    return [(BITS - int(e), w) for e, w in zip(ends, widths, strict=True)]


def plan(n: int, d: int, method: str = "auto") -> tuple[int, int]:
    """(m, t): blocks and blocks a key for `n` hashes at distance `d` (see the module doc)."""
    if method == "mih" or d >= 32:
        return d + 1, 1
    options = [(d + t, t) for t in range(1, 6) if d + t <= BITS]
    if method == "tables":
        options = options[1:] or options

    def cost(mt: tuple[int, int]) -> float:
        m, t = mt
        key_bits = BITS * t / m
        pairs = n * n / 2 / 2**key_bits
        return math.comb(m, t) * (n * SORT_NS + pairs * PAIR_NS)

    return min(options, key=cost)


def _keys(h: np.ndarray, chosen: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The table key: the chosen blocks' bits side by side, in the narrowest unsigned dtype."""
    key = np.zeros(len(h), dtype=np.uint64)
    for shift, width in chosen:
        key = (key << np.uint64(width)) | ((h >> np.uint64(shift)) & np.uint64((1 << width) - 1))
    bits = sum(w for _, w in chosen)
    return key.astype(np.uint16 if bits <= 16 else np.uint32 if bits <= 32 else np.uint64)


def _sort(key: np.ndarray) -> np.ndarray:
    """A stable argsort in radix passes of 16 bits (numpy's radix sort takes no wider keys)."""
    order = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
    for shift in range(16, key.dtype.itemsize * 8, 16):
        high = (key[order] >> shift).astype(np.uint16)
        order = order[np.argsort(high, kind="stable")]
    return order


def _table_pairs(h: np.ndarray, key: np.ndarray, d: int) -> Iterator[np.ndarray]:
    """(k, 3) rows (i, j, distance) of hashes with one key within `d`: the runs of each length L
    of sorted keys are one (runs, L) block, compared o places apart for o = 1 .. L - 1."""
    order = _sort(key)
    ks, hs = key[order], h[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    lens = np.diff(np.r_[starts, len(ks)])
    for length in np.unique(lens[lens > 1]).tolist():
        idx = starts[lens == length, None] + np.arange(length)
        block = hs[idx]
        for o in range(1, length):
            dist = np.bitwise_count(block[:, :-o] ^ block[:, o:])
            r, c = np.nonzero(dist <= d)
            if len(r):
                yield np.stack(
                    [order[idx[r, c]], order[idx[r, c + o]], dist[r, c].astype(np.int64)], axis=1
                )


def near_pairs(
    a: np.ndarray,
    b: np.ndarray | None = None,
    max_distance: int = DEFAULT_DISTANCE,
    method: str = "auto",
) -> np.ndarray:
    """(K, 3) int64 rows (i, j, distance) sorted: pairs within `a` (i < j), or across a, b."""
    a = np.asarray(a, dtype=np.uint64)
    h = np.ascontiguousarray(a if b is None else np.concatenate([a, np.asarray(b, np.uint64)]))
    d = max_distance
    if d < 0:
        raise ValueError(f"max_distance {d} is negative")
    if len(h) < 2:
        return np.zeros((0, 3), dtype=np.int64)
    m, t = plan(len(h), min(d, BITS), method)
    tables = list(itertools.combinations(blocks(m), t))

    def table(chosen: tuple[tuple[int, int], ...]) -> list[np.ndarray]:
        return [rows for rows in _table_pairs(h, _keys(h, chosen), d) if len(rows)]

    from concurrent.futures import ThreadPoolExecutor  # here: a pack imports this module

    # Sorting and gathering release the GIL: the tables run on threads, one per core.
    workers = min(len(tables), os.cpu_count() or 1) if len(h) >= THREADED else 1
    with ThreadPoolExecutor(workers) as pool:
        found = [rows for got in pool.map(table, tables) for rows in got]
    if not found:
        return np.zeros((0, 3), dtype=np.int64)
    rows = np.concatenate(found).astype(np.int64)
    rows[:, :2] = np.sort(rows[:, :2], axis=1)  # i < j, each pair once, sorted by (i, j)
    _, first = np.unique(rows[:, 0] * (rows[:, 1].max() + 1) + rows[:, 1], return_index=True)
    rows = rows[first]
    if b is None:
        return rows
    rows = rows[(rows[:, 0] < len(a)) & (rows[:, 1] >= len(a))]
    rows[:, 1] -= len(a)
    return rows
