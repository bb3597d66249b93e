"""`in_memory=True`: a store's arrays copied once into shared memory, which every worker of the
loader maps instead of the files (SharedArrays); the store's own maps where an array was not
copied."""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
import torch

from loaders.format import OFFSETS
from loaders.read.buffers import new_shared
from loaders.read.store import Places, ShardStore


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
                self._memory[name] = new_shared(int(starts[-1]) * size * math.prod(spec.shape))
                whole = self._view(name, writeable=True)
                for s in range(len(starts) - 1):
                    whole[starts[s] : starts[s + 1]] = self.store.array(s, name)
                continue
            refs = [shard.arrays[name] for shard in m.shards]
            self._memory[name] = new_shared(sum(r.length for r in refs) * size)
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
        files = {s: m.shards[s].arrays[name].file for s, _ in groups}
        return srcs, Places(files, shard, local, self.store.source, self.store.root)

    def ragged(self, shard: int, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A ragged array of one shard: its data, and count + 1 offsets into it."""
        if name not in self._memory:
            return self.store.array(shard, name), self.store.array(shard, name + OFFSETS)
        start, end = self._starts[shard], self._starts[shard + 1]
        return self._view(name), self._memory[name + OFFSETS].numpy()[start : end + 1]
