"""The decompressed chunks a process keeps for its compressed arrays (loaders.format.chunks): one
buffer of KEPT_BYTES in slots of SLOT_BYTES, a chunk a slot, the least recently used refilled
first. The buffer is reused for every array: writing a chunk into pages never touched costs
two to three times decompressing it (a page fault a 4 KiB page)."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Protocol

import numpy as np

# Room for two windows of order="chunk_random" (loaders.read.samplers, 128 chunks each by
# default), so that order decompresses each chunk about once an epoch; a read in order needs
# one or two chunks an array
KEPT_BYTES = 64 << 20
SLOT_BYTES = 1 << 18  # prep.run.shardwriter.CHUNK_BYTES: any chunk prep writes fits in one


def slots() -> int:
    """Chunks the process keeps at once (one a slot, whatever its size)."""
    return max(1, KEPT_BYTES // SLOT_BYTES)


class Owner(Protocol):
    """A compressed array: chunk j is in slot slot_of[j] (-1: not kept); `lets_go` counts the
    chunks it lost, so a read under way can tell it read a slot refilled meanwhile."""

    slot_of: np.ndarray
    lets_go: int


class Kept:
    """The slots, and which array's chunk each holds (least recently used first)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # loader threads share it
        self.slab = np.empty((0, SLOT_BYTES), np.uint8)
        self.owners: OrderedDict[int, tuple[weakref.ref[Owner], int]] = OrderedDict()
        self.free: list[int] = []
        self.n = 0  # slots in use (of the buffer's rows)
        self.filling: set[int] = set()  # reserved, being written: never let go meanwhile

    def reserve(
        self, owner: Owner, js: list[int], keep: np.ndarray
    ) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The buffer, and slots to fill with `owner`'s chunks `js`: fewer when only the slots
        of `keep` (chunks a read needs together) are left. Fill each, then `publish` it."""
        with self.lock:
            self._sized()
            held = owner.slot_of[keep]
            kept = set(held[held >= 0].tolist())
            for slot in kept:
                self.owners.move_to_end(slot)
            got: list[tuple[int, int]] = []
            for j in js:
                if not self.free:
                    busy = kept | self.filling
                    victim = next((s for s in self.owners if s not in busy), None)
                    if victim is None:
                        break
                    self._let_go(victim)
                slot = self.free.pop()
                self.owners[slot] = (weakref.ref(owner), j)
                kept.add(slot)
                self.filling.add(slot)
                got.append((j, slot))
            return self.slab, got

    def publish(self, owner: Owner, j: int, slot: int, filled: bool) -> None:
        """Slot `slot` holds `owner`'s chunk j now; free again if not `filled` (it failed) or
        if two threads filled chunk j at once (the first one's slot stays: one slot a chunk)."""
        with self.lock:
            self.filling.discard(slot)
            if filled and owner.slot_of[j] < 0:
                owner.slot_of[j] = slot
            else:  # failed, or another thread kept chunk j meanwhile: readers may hold its slot
                self.owners.pop(slot)
                self.free.append(slot)

    def _sized(self) -> None:
        """KEPT_BYTES of slots (changed: every chunk let go; the buffer replaced only to grow,
        so that a budget set back and forth touches no new pages)."""
        n = slots()
        if n != self.n and not self.filling:
            for slot in list(self.owners):
                self._let_go(slot)
            if n > len(self.slab):
                self.slab = np.empty((n, SLOT_BYTES), np.uint8)
            self.free, self.n = list(range(n))[::-1], n

    def _let_go(self, slot: int) -> None:
        ref, j = self.owners.pop(slot)
        owner = ref()
        if owner is not None:
            if owner.slot_of[j] == slot:
                owner.slot_of[j] = -1
            owner.lets_go += 1  # before the slot is refilled: a read of it reads again
        self.free.append(slot)


KEPT = Kept()
