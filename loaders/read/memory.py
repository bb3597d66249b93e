"""A dataset's arrays, mapped or from one copy in shared memory, and where samples are."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from loaders.format import OFFSETS
from loaders.read.batches import new_shared
from loaders.read.store import ShardStore


def _shared(nbytes: int) -> torch.Tensor:
    """uint8 over new shared memory, not zeroed (no copy of garbage, as new_batch)."""
    return torch.empty(0, dtype=torch.uint8).set_(new_shared(nbytes))


@dataclass(eq=False)
class Places(Sequence[str]):
    """Where each sample of a batch is, "FILE (shard S, sample K)": made when asked (errors)."""

    files: dict[int, object]
    shard: np.ndarray
    local: np.ndarray
    source: Callable[[int, int], str | None] | None = None  # ShardStore.source

    def __len__(self) -> int:
        return len(self.local)

    def __getitem__(self, j: int) -> str:  # type: ignore[override]
        s, k = int(self.shard[j]), int(self.local[j])
        src = self.source(s, k) if self.source is not None else None
        return f"{self.files[s]} (shard {s}, sample {k}){f', packed from {src}' if src else ''}"


class SharedArrays:
    """A process's view of a store's arrays and of `memory` (array name -> its shared bytes)."""

    def __init__(self, store: ShardStore, memory: dict[str, torch.Tensor]):
        self.store = store
        self._memory = memory
        self._views: dict[str, np.ndarray] = {}  # numpy views of memory

    @cached_property
    def _starts(self) -> np.ndarray:  # cumulative sample counts
        return np.cumsum([0] + [s.count for s in self.store.manifest.shards])

    def load(self, names: set[str]) -> None:
        """Copy arrays `names` into shared memory: raw ones whole, ragged ones with offsets."""
        starts, m = self._starts, self.store.manifest
        for name in sorted(names & set(m.arrays)):
            spec = m.arrays[name]
            size = np.dtype(spec.dtype).itemsize
            if not spec.ragged:
                self._memory[name] = _shared(int(starts[-1]) * size * math.prod(spec.shape))
                whole = self._view(name, writeable=True)
                for s in range(len(starts) - 1):
                    whole[starts[s] : starts[s + 1]] = self.store.array(s, name)
                continue
            refs = [shard.arrays[name] for shard in m.shards]
            self._memory[name] = _shared(sum(r.length for r in refs) * size)
            off = torch.zeros(int(starts[-1]) + 1, dtype=torch.int64).share_memory_()
            data, o, pos = self._view(name, writeable=True), off.numpy(), 0
            for s, ref in enumerate(refs):
                data[pos : pos + ref.length] = self.store.array(s, name)
                o[starts[s] : starts[s + 1] + 1] = self.store.array(s, name + OFFSETS) + pos
                pos += ref.length
            self._memory[name + OFFSETS] = off

    def _view(self, name: str, writeable: bool = False) -> np.ndarray:
        """Array `name` of every shard as a view of its shared bytes (raw: (samples, *shape))."""
        found = self._views.get(name)
        if found is None or writeable:
            spec = self.store.manifest.arrays[name]
            found = self._memory[name].numpy().view(spec.dtype)
            if not spec.ragged:
                found = found.reshape(int(self._starts[-1]), *spec.shape)
            found.flags.writeable = writeable  # the readers' copy is shared: never write to it
            if not writeable:
                self._views[name] = found
        return found

    def array(self, shard: int, name: str) -> np.ndarray:
        if name not in self._memory:
            return self.store.array(shard, name)
        return self._view(name)[self._starts[shard] : self._starts[shard + 1]]

    def samples(
        self, name: str, groups: list[tuple[int, np.ndarray]], local: np.ndarray
    ) -> tuple[list[np.ndarray], Places]:
        """A batch's samples (by_shard `groups`, `local` index) of array `name`, and Places."""
        m = self.store.manifest
        spec = m.arrays[name]
        srcs: list[np.ndarray] = [np.empty(0)] * len(local)
        shard = np.empty(len(local), dtype=np.int64)
        ks = local.tolist()
        for s, pos in groups:
            shard[pos] = s
            data, off = self.ragged(s, name) if spec.ragged else (self.array(s, name), None)
            if off is None:
                for j in pos.tolist():
                    srcs[j] = data[ks[j]]
            else:
                o = off.tolist() if len(pos) * 8 > len(off) else None  # few: index the map
                for j in pos.tolist():
                    k = ks[j]
                    srcs[j] = data[o[k] : o[k + 1]] if o else data[off[k] : off[k + 1]]
        files = {s: self.store.root / m.shards[s].arrays[name].file for s, _ in groups}
        return srcs, Places(files, shard, local, self.store.source)

    def ragged(self, shard: int, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A ragged array of one shard: its data, and count + 1 offsets into it."""
        if name not in self._memory:
            return self.store.array(shard, name), self.store.array(shard, name + OFFSETS)
        start, end = self._starts[shard], self._starts[shard + 1]
        return self._view(name), self._memory[name + OFFSETS].numpy()[start : end + 1]


def by_shard(shard: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(shard, positions in the batch of its samples) for each shard of a batch, in order.

    >>> [(s, p.tolist()) for s, p in by_shard(np.array([2, 0, 2]))]
    [(0, [1]), (2, [0, 2])]
    """
    if len(shard) == 0:
        return []
    order = np.argsort(shard, kind="stable")
    cuts = np.flatnonzero(np.diff(shard[order])) + 1
    return [(int(shard[g[0]]), g) for g in np.split(order, cuts)]
