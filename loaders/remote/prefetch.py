"""Following the sampler through its "quasi_random" windows: the sampler writes where it is
(`WindowPlan.set`), each reading process looks once a batch (`Follower.follow`), prefetches the
windows ahead and ranks the cache for eviction (docs/machines.md, "Datasets on object storage")."""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

THREADS = 4  # downloads at once per process (a worker fetches only its share)
Rank = Callable[[str, int], "tuple[int, int] | None"]


def window_groups(shards: np.ndarray, window: int) -> list[np.ndarray]:
    return [shards[w : w + window] for w in range(0, len(shards), window)]


def windows(num_shards: int, seed: int, epoch: int, window: int = 8) -> list[np.ndarray]:
    """The shards of each window of `epoch` in order "quasi_random", in reading order.

    >>> [w.tolist() for w in windows(3, seed=3, epoch=0, window=2)]
    [[2, 1], [0]]
    """
    rng = np.random.default_rng([seed, epoch])  # as epoch_order: its first draw is the shards'
    return window_groups(rng.permutation(num_shards), window)


class WindowPlan:
    """Which window the sampler yields now, shared by every process of a loader: one int64 in
    shared memory (epoch * windows + window, -1 before the first) that workers see move."""

    def __init__(self, num_shards: int, seed: int, window: int):
        self.num_shards, self.seed, self.window = num_shards, seed, window
        self.per_epoch = max(1, math.ceil(num_shards / window))
        self._at = torch.full((), -1, dtype=torch.int64).share_memory_()
        self._epochs: dict[int, list[np.ndarray]] = {}

    def set(self, epoch: int, k: int) -> None:
        self._at.fill_(epoch * self.per_epoch + k)

    def position(self) -> int | None:
        at = int(self._at)
        return None if at < 0 else at

    def shards(self, at: int) -> np.ndarray:
        """The shards of window `at` (a position as `position` gives; negative: none)."""
        if at < 0:
            return np.zeros(0, np.int64)
        epoch, k = divmod(at, self.per_epoch)
        if epoch not in self._epochs:
            self._epochs = {epoch: windows(self.num_shards, self.seed, epoch, self.window)}
        groups = self._epochs[epoch]
        return groups[k] if k < len(groups) else np.zeros(0, np.int64)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_epochs": {}}


class Follower:
    """One process's side of a plan; `files[s]`: shard s's array -> (file, bytes, sha256)."""

    def __init__(self, plan: WindowPlan, limit: int | None):
        self.plan, self.limit = plan, limit
        self.read: set[str] = set()  # array names this process has read
        self._done: tuple[int, int] | None = None  # (position, arrays known) last acted on
        self._pool: ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._uses: tuple[int, dict[str, list[int]]] = -1, {}  # epoch's first position, uses

    def follow(
        self, files: list[dict[str, tuple[str, int, str]]], fetch: Callable[[str], object]
    ) -> tuple[Rank, set[str], frozenset[int]] | None:
        """Once the sampler moved, the prefetch started: (eviction order, held sha256, shards)."""
        at = self.plan.position()
        with self._lock:  # the loader's reading threads all look
            if at is None or (at, len(self.read)) == self._done:
                return None
            self._done = at, len(self.read)
        shards = frozenset(s for d in (-1, 0, 1) for s in self.plan.shards(at + d).tolist())
        near: dict[int, list[tuple[str, int, str]]] = {}  # each window's files this process reads
        for w in (at - 1, at, at + 1):
            ids = self.plan.shards(w).tolist()
            near[w] = [files[s][a] for s in ids for a in self.read & files[s].keys()]
        guarded = {sha for group in near.values() for _, _, sha in group}
        wanted = [f for group in (near[at], near[at + 1]) for f in group]
        if self.limit is None or sum({sha: b for _, b, sha in wanted}.values()) <= self.limit:
            self._prefetch(sorted({name for name, _, _ in wanted}), fetch)
        return self._rank(files, at, guarded), guarded, shards

    def _prefetch(self, names: list[str], fetch: Callable[[str], object]) -> None:
        worker = get_worker_info()
        if worker is not None:  # the workers share the downloads out, by name
            names = names[worker.id :: worker.num_workers]
        if self._pool is None or self._pid != os.getpid():  # threads do not survive a fork
            self._pool, self._pid, self._pending = ThreadPoolExecutor(THREADS), os.getpid(), set()
        for name in names:
            if name not in self._pending:
                self._pending.add(name)
                self._pool.submit(self._quietly, fetch, name)

    def _quietly(self, fetch: Callable[[str], object], name: str) -> None:
        """A prefetch that fails is let be: the read that needs the file raises the error."""
        with contextlib.suppress(Exception):  # fetched again, and reported, when read
            fetch(name)
        self._pending.discard(name)

    def _rank(
        self, files: list[dict[str, tuple[str, int, str]]], at: int, guarded: set[str]
    ) -> Rank:
        """Eviction order at `at`: a key per cache entry (smaller goes first), None: stays."""
        first = at - at % self.plan.per_epoch
        if self._uses[0] != first:  # once an epoch: where each file is read in it
            uses: dict[str, list[int]] = {}
            for k in range(self.plan.per_epoch):
                for s in self.plan.shards(first + k).tolist():
                    for _, _, sha in files[s].values():
                        uses.setdefault(sha, []).append(first + k)
            self._uses = first, uses
        uses = self._uses[1]

        def rank(sha: str, mtime: int) -> tuple[int, int] | None:
            if sha in guarded:
                return None
            when = uses.get(sha)
            if when is None:
                return 1, mtime  # another dataset's, or another version's: LRU
            later = bisect.bisect_left(when, at)
            if later == len(when):
                return 0, mtime  # read this epoch already
            return 2, -when[later]  # needed later this epoch: the latest first

        return rank
