"""ImageShardDataset: packed image shards as a map-style torch Dataset of uint8 tensors."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from loaders.format import array_name, open_array
from loaders.loader import Batch, BufferPool, check_indices, new_batch
from loaders.store import ShardStore

# Fields whose arrays exist once per size; the others (label, orig_size) are size-free.
SIZED_FIELDS = ("image", "mask")


class ImageShardDataset(ShardStore, Dataset[tuple[torch.Tensor, ...]]):
    """Samples of a packed image dataset, as a tuple in `fields` order:

    - "image": uint8 (C, H, W), a channels-last view of the HWC storage (no copy, no permute);
    - "mask": uint8 (H, W) class ids;  "label": int64 ();  "orig_size": int64 (2,) source (h, w).

    Shard files are memory-mapped lazily, once per process, and never pickled: the object pickles
    to a few KB for spawn workers. A batch is read by `__getitems__` in one call: one
    vectorised read when it lies in one shard, else one copy per sample straight into place;
    use `make_loader` (or `collate_fn=collate_batch`) to keep that path.

    `in_memory=True` reads the requested fields, at every size the dataset holds (so set_size
    still works), into shared memory once, here: for slow or network disks. DataLoader workers,
    forked or spawned, map that one copy instead of copying it or reading the disk.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        size: int | None = None,
        fields: Sequence[str] = ("image", "label"),
        in_memory: bool = False,
    ):
        manifest = self._open_store(root, "images")
        self.fields = tuple(fields)
        have = manifest.fields()
        missing = [f for f in self.fields if f not in have]
        if missing or not self.fields:
            raise ValueError(f"{self.root} has no field {missing}; it has {have}")
        self.sizes = manifest.sizes()
        if size is None:
            if len(self.sizes) != 1:
                raise ValueError(f"{self.root} has sizes {self.sizes}: pass size=")
            size = self.sizes[0]
        self.classes = manifest.classes
        self._starts = np.cumsum([0] + [s.count for s in manifest.shards])
        # The current size lives in shared memory so that set_size() reaches persistent
        # DataLoader workers (forked or spawned) before the next epoch starts.
        self._size = torch.zeros((), dtype=torch.int64).share_memory_()
        self._buffers = BufferPool()
        self._memory: dict[str, torch.Tensor] = {}  # array name -> its bytes, all shards
        self.set_size(size)
        if in_memory:
            self._load_into_memory()

    # -- size ----------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return int(self._size)

    def set_size(self, size: int) -> None:
        """Switch every sized field to `size` px (progressive resizing between epochs)."""
        if size not in self.sizes:
            raise ValueError(f"{self.root} has no size {size}; it has {self.sizes}")
        self._size.fill_(size)

    # -- storage -------------------------------------------------------------------------------

    @property
    def shard_sizes(self) -> list[int]:
        """Samples per shard, in order (for shard-aware samplers)."""
        return np.diff(self._starts).tolist()

    def _array_names(self) -> list[str]:
        """The arrays of the requested fields, at every size."""
        return [
            array_name(f, s)
            for f in self.fields
            for s in (self.sizes if f in SIZED_FIELDS else [None])
        ]

    def _load_into_memory(self) -> None:
        m = self.manifest
        for name in self._array_names():
            spec = m.arrays[name]
            nbytes = len(self) * np.dtype(spec.dtype).itemsize * math.prod(spec.shape)
            storage = torch.UntypedStorage._new_shared(nbytes)  # no copy of garbage, as new_batch
            self._memory[name] = torch.empty(0, dtype=torch.uint8).set_(storage)
            whole = self._memory_array(name, writeable=True)
            for shard, info in enumerate(m.shards):
                start, end = self._starts[shard], self._starts[shard + 1]
                whole[start:end] = open_array(self.root, info.arrays[name], spec, name)

    def _memory_array(self, name: str, writeable: bool = False) -> np.ndarray:
        """Array `name` of every shard, as a view of its shared-memory bytes."""
        spec = self.manifest.arrays[name]
        whole = self._memory[name].numpy().view(spec.dtype).reshape(len(self), *spec.shape)
        whole.flags.writeable = writeable  # the readers' copy is shared: never write to it
        return whole

    def _array(self, shard: int, field: str, size: int) -> np.ndarray:
        name = array_name(field, size if field in SIZED_FIELDS else None)
        if name not in self._memory:
            return self._map(shard, name)
        key = (shard, name)
        if key not in self._maps:
            self._maps[key] = self._memory_array(name)[
                self._starts[shard] : self._starts[shard + 1]
            ]
        return self._maps[key]

    def __getstate__(self) -> dict[str, Any]:
        return super().__getstate__() | {"_buffers": BufferPool()}

    # -- access --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _locate(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        idx = check_indices(indices, len(self))
        shard = np.searchsorted(self._starts, idx, side="right") - 1
        return shard, idx - self._starts[shard]

    def _out(self, field: str, batch: int, size: int) -> torch.Tensor:
        if field in ("label", "orig_size"):
            shape, dtype = (batch, *self.manifest.arrays[field].shape), torch.int64
        else:
            shape = (batch, *self.manifest.arrays[array_name(field, size)].shape)
            dtype = torch.uint8
        return new_batch(shape, dtype, self._buffers, field)

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        shard, local = self._locate(indices)
        size = self.size  # read once: set_size may run between batches, never within one
        shards = np.unique(shard).tolist()
        outs = []
        for field in self.fields:
            out = self._out(field, len(shard), size)
            dst = out.numpy()
            arrays = {s: self._array(s, field, size) for s in shards}
            if len(shards) == 1 and dst.dtype == arrays[shards[0]].dtype:
                # The whole batch in one shard: one vectorised read, straight into the output.
                # mode="clip": the indices are checked already, and the default ("raise")
                # buffers the whole output before copying it into `out`.
                np.take(arrays[shards[0]], local, axis=0, out=dst, mode="clip")
            elif field in SIZED_FIELDS:
                # Across shards: copy each sample once into place (a gather per shard followed
                # by a scatter would copy every pixel twice).
                for j, (s, k) in enumerate(zip(shard.tolist(), local.tolist(), strict=True)):
                    dst[j] = arrays[s][k]
            else:
                for s, arr in arrays.items():
                    pos = np.flatnonzero(shard == s)
                    dst[pos] = arr[local[pos]]
            outs.append(out.permute(0, 3, 1, 2) if field == "image" else out)
        return Batch(tuple(outs))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        return self.__getitems__([index])[0]

    def __repr__(self) -> str:
        return (
            f"ImageShardDataset({str(self.root)!r}, size={self.size}, fields={self.fields}, "
            f"samples={len(self)}, shards={len(self._starts) - 1}, sizes={self.sizes})"
        )
