"""Bin packing of pieces into sequences of `seq_len` tokens, the kernels of
loaders.packing.plan: pure functions of int arrays (each piece's sequence out, numbered from 0).

>>> bins, count = best_fit(np.array([5, 3, 2, 1]), [0, 4], seq_len=8)
>>> bins.tolist(), count  # 5 + 3; 2 + 1 in a second sequence
([0, 0, 1, 1], 2)
"""

from __future__ import annotations

import itertools

import numpy as np


def stable_order(keys: np.ndarray) -> np.ndarray:
    """np.argsort(keys, kind="stable") of non-negative ints, a 16-bit digit at a time: numpy
    sorts uint16 by radix, so 1M keys take a pass or two of ~10 ms, not a 90 ms merge sort."""
    order = np.arange(len(keys))
    shift, top = 0, int(keys.max(initial=0))
    while True:
        digit = ((keys[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
        if top >> shift == 0:
            return order


class _Bins:
    """Best fit's open bins in one window, by room: a stack of bins per room, and a bit set of
    the rooms that have one, so the tightest bin with room >= L is the lowest set bit at or
    above L (a shift and an and of a seq_len-bit int, not a search over the bins). Where items
    went is appended to `boxes` and `counts`: item runs counts[j] long into bin boxes[j]."""

    def __init__(self, seq_len: int, count: int, boxes: list[int], counts: list[int]):
        self.seq_len, self.count, self.boxes, self.counts = seq_len, count, boxes, counts
        self.stacks: dict[int, list[int]] = {}
        self.rooms = 0  # bit r: some open bin has room r

    def place(self, size: int, k: int) -> None:
        """k items of `size`, each into the tightest bin it fits, as one by one; but a room at
        a time: bins of the tightest room r each take r // size items in turn (after one,
        r - size >= size is the tightest room; the last bin to reach r first), and leave with
        r % size, too little for another; with no room left, new bins take seq_len // size."""
        while k and self.rooms >> size:
            above = self.rooms >> size
            room = size + (above & -above).bit_length() - 1
            stack = self.stacks[room]
            each = room // size
            cut = len(stack) - min(len(stack), k // each)
            self._took(stack[cut:][::-1], each, size, room)
            k -= (len(stack) - cut) * each
            del stack[cut:]
            if k and stack:  # fewer than `each` left: the next bin takes them all
                self._took([stack.pop()], k, size, room)
                k = 0
            if not stack:
                self.rooms &= ~(1 << room)
        if k:
            each = self.seq_len // size
            full, part = divmod(k, each)
            new = range(self.count, self.count + full + (part > 0))
            self.count = new.stop
            self._took(list(new[:full]), each, size, self.seq_len)
            if part:
                self._took([new[-1]], part, size, self.seq_len)

    def _took(self, bins: list[int], each: int, size: int, room: int) -> None:
        """`bins`, of `room` each, took `each` items of `size` apiece: recorded, and reopened
        at the room they have left (a full bin takes nothing more)."""
        if bins:
            self.boxes += bins
            self.counts += [each] * len(bins)
            left = room - each * size
            if left:
                self.stacks.setdefault(left, []).extend(bins)
                self.rooms |= 1 << left


def best_fit(sizes: np.ndarray, bounds: list[int], seq_len: int) -> tuple[np.ndarray, int]:
    """Best fit over runs `bounds` of `sizes` (each run in decreasing order): each one's bin.
    Equal sizes are placed together (_Bins.place): a Python step a group and room, not an item."""
    n = len(sizes)
    change = np.ones(n + 1, bool)  # where a group starts: a new size, or a new window
    change[1:n] = sizes[1:] != sizes[:-1]
    change[bounds] = True
    cuts = np.flatnonzero(change)
    group, runs = sizes[cuts[:-1]].tolist(), np.diff(cuts).tolist()
    boxes: list[int] = []
    counts: list[int] = []
    count = 0
    for a, b in itertools.pairwise(np.searchsorted(cuts, bounds).tolist()):
        bins = _Bins(seq_len, count, boxes, counts)
        for size, k in zip(group[a:b], runs[a:b], strict=True):
            bins.place(size, k)
        count = bins.count
    return np.repeat(np.asarray(boxes, np.int64), counts), count


def first_fit(sizes: np.ndarray, bounds: list[int], seq_len: int) -> tuple[np.ndarray, int]:
    """First fit over runs `bounds` of `sizes`: each item into the oldest open bin it fits."""
    out = np.empty(len(sizes), dtype=np.int64)
    count = 0
    room = np.empty(int(np.diff(bounds).max(initial=0)), dtype=np.int64)  # a bin an item at most
    for a, b in itertools.pairwise(bounds):
        open_ = 0  # bins open in this run: room[:open_]
        for i in range(a, b):
            size = int(sizes[i])
            box = int(np.argmax(room[:open_] >= size)) if open_ else 0
            if open_ == 0 or room[box] < size:  # argmax's 0 when none fits
                box, open_ = open_, open_ + 1
                room[box] = seq_len
            room[box] -= size
            out[i] = count + box
        count += open_
    return out, count
