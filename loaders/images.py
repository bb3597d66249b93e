"""ImageShardDataset: packed image shards as a map-style torch Dataset of uint8 tensors."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from loaders.fields import FIELDS
from loaders.format import array_name
from loaders.loader import Batch, BufferPool, check_indices, new_batch
from loaders.store import DEFAULT_MAX_OPEN, ShardStore, pickled_state


class ImageShardDataset(Dataset[tuple[torch.Tensor, ...]]):
    """Samples of a packed image dataset, as a tuple in `fields` order, each as its field in
    `loaders.fields.FIELDS` makes it:

    - "image": uint8 (C, H, W), a channels-last view of the HWC storage (no copy, no permute);
    - "mask": uint8 (H, W) class ids;  "label": int64 ();  "orig_size": int64 (2,) source (h, w);
    - "index": int64 (), the sample's dataset index, never stored (for loaders.transforms).

    Shard files are memory-mapped lazily by `self.store`, at most `max_open` at a time, and never
    pickled: the object pickles to under 1 KB for spawn workers, whatever its shard and class
    count. A batch is read by `__getitems__` in one call: one vectorised read when it lies in
    one shard, else one copy per sample straight into place; use `make_loader` (or
    `collate_fn=collate_batch`) to keep that path. Each batch first checks that the folder was
    not repacked since the dataset was made (FormatError if it was).

    `in_memory=True` reads the requested fields, at every size the dataset holds (so set_size
    still works), into shared memory once, here: for slow or network disks. DataLoader workers,
    forked or spawned, map that one copy instead of copying it or reading the disk.

    `root` may be an fsspec URL (s3://, gs://, http(s)://): shard files are fetched once per
    node into `cache_dir` (default ~/.cache/prep), verified, and mapped; `cache_limit` (bytes or
    "200GB") bounds it; `storage_options` passes through to fsspec (see loaders.remote).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        size: int | None = None,
        fields: Sequence[str] = ("image", "label"),
        in_memory: bool = False,
        *,
        max_open: int = DEFAULT_MAX_OPEN,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        storage_options: dict[str, Any] | None = None,
    ):
        self.store = ShardStore(
            root,
            "images",
            max_open=max_open,
            cache_dir=cache_dir,
            cache_limit=cache_limit,
            storage_options=storage_options,
        )
        self.fields = tuple(fields)
        have = [*self.store.manifest.fields(), "index"]
        missing = [f for f in self.fields if f not in have]
        if missing or not self.fields:
            raise ValueError(f"{self.store.root} has no field {missing}; it has {have}")
        if size is None:
            if len(self.sizes) != 1:
                raise ValueError(f"{self.store.root} has sizes {self.sizes}: pass size=")
            size = self.sizes[0]
        # The current size lives in shared memory so that set_size() reaches persistent
        # DataLoader workers (forked or spawned) before the next epoch starts.
        self._size = torch.zeros((), dtype=torch.int64).share_memory_()
        self._memory: dict[str, torch.Tensor] = {}  # array name -> its bytes, all shards
        self.set_size(size)
        if in_memory:
            self._load_into_memory()

    # -- what the manifest says: recomputed after unpickling, never pickled ------------------

    @cached_property
    def sizes(self) -> list[int]:
        return self.store.manifest.sizes()

    @cached_property
    def classes(self) -> list[str] | None:
        return self.store.manifest.classes

    @cached_property
    def _starts(self) -> np.ndarray:
        """Cumulative sample counts: shard s holds samples [_starts[s], _starts[s + 1])."""
        return np.cumsum([0] + [s.count for s in self.store.manifest.shards])

    @cached_property
    def _buffers(self) -> BufferPool:
        return BufferPool()

    @cached_property
    def _views(self) -> dict[str, np.ndarray]:
        """In-memory arrays as numpy views, made once per process."""
        return {}

    def __getstate__(self) -> dict[str, Any]:
        return pickled_state(self)

    # -- size ----------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return int(self._size)

    def set_size(self, size: int) -> None:
        """Switch every sized field to `size` px (progressive resizing between epochs)."""
        if size not in self.sizes:
            raise ValueError(f"{self.store.root} has no size {size}; it has {self.sizes}")
        self._size.fill_(size)

    # -- storage -------------------------------------------------------------------------------

    @property
    def shard_sizes(self) -> list[int]:
        """Samples per shard, in order (for shard-aware samplers)."""
        return np.diff(self._starts).tolist()

    def _name(self, field: str, size: int | None) -> str:
        return array_name(field, size if FIELDS[field].sized else None)

    def _load_into_memory(self) -> None:
        """Every size of the requested fields (so that set_size still works)."""
        stored = [f for f in self.fields if FIELDS[f].codecs]
        names = {self._name(f, s) for f in stored for s in self.sizes}
        for name in sorted(names):
            spec = self.store.manifest.arrays[name]
            nbytes = len(self) * np.dtype(spec.dtype).itemsize * math.prod(spec.shape)
            storage = torch.UntypedStorage._new_shared(nbytes)  # no copy of garbage, as new_batch
            self._memory[name] = torch.empty(0, dtype=torch.uint8).set_(storage)
            whole = self._memory_array(name, writeable=True)
            for shard in range(len(self._starts) - 1):
                whole[self._starts[shard] : self._starts[shard + 1]] = self.store.array(shard, name)

    def _memory_array(self, name: str, writeable: bool = False) -> np.ndarray:
        """Array `name` of every shard, as a view of its shared-memory bytes."""
        whole = self._views.get(name)
        if whole is None or writeable:
            spec = self.store.manifest.arrays[name]
            whole = self._memory[name].numpy().view(spec.dtype).reshape(len(self), *spec.shape)
            whole.flags.writeable = writeable  # the readers' copy is shared: never write to it
            if not writeable:
                self._views[name] = whole
        return whole

    def _array(self, shard: int, field: str, size: int) -> np.ndarray:
        name = self._name(field, size)
        if name not in self._memory:
            return self.store.array(shard, name)
        return self._memory_array(name)[self._starts[shard] : self._starts[shard + 1]]

    # -- access --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _locate(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        idx = check_indices(indices, len(self))
        shard = np.searchsorted(self._starts, idx, side="right") - 1
        return shard, idx - self._starts[shard]

    def _out(self, field: str, batch: int, size: int) -> torch.Tensor:
        shape = (batch, *self.store.manifest.arrays[self._name(field, size)].shape)
        dtype = getattr(torch, FIELDS[field].out_dtype)
        return new_batch(shape, dtype, self._buffers, field)

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        self.store.check()  # a repacked folder: refuse it rather than mix two datasets
        shard, local = self._locate(indices)
        size = self.size  # read once: set_size may run between batches, never within one
        groups = _by_shard(shard)
        outs = []
        for field in self.fields:
            if field == "index":
                out = new_batch((len(shard),), torch.int64, self._buffers, field)
                out.numpy()[:] = self._starts[shard] + local
                outs.append(out)
                continue
            out = self._out(field, len(shard), size)
            self._fill(out.numpy(), field, size, groups, local)
            outs.append(FIELDS[field].to_tensor(out))
        return Batch(tuple(outs))

    def _fill(
        self,
        dst: np.ndarray,
        field: str,
        size: int,
        groups: list[tuple[int, np.ndarray]],
        local: np.ndarray,
    ) -> None:
        """Samples `local` of their shards into `dst`, one shard's map at a time (a batch across
        more shards than the store keeps open still holds one map at a time)."""
        if len(groups) == 1:
            arr = self._array(groups[0][0], field, size)
            if dst.dtype == arr.dtype:
                # The whole batch in one shard: one vectorised read, straight into the output.
                # mode="clip": the indices are checked already, and the default ("raise")
                # buffers the whole output before copying it into `dst`.
                np.take(arr, local, axis=0, out=dst, mode="clip")
                return
        for s, pos in groups:
            arr = self._array(s, field, size)
            if FIELDS[field].sized:
                # Big samples: copy each once into place (a gather per shard followed by a
                # scatter would copy every pixel twice).
                for j, k in zip(pos.tolist(), local[pos].tolist(), strict=True):
                    dst[j] = arr[k]
            else:
                dst[pos] = arr[local[pos]]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        return self.__getitems__([index])[0]

    def __repr__(self) -> str:
        return (
            f"ImageShardDataset({str(self.store.root)!r}, size={self.size}, fields={self.fields}, "
            f"samples={len(self)}, shards={len(self._starts) - 1}, sizes={self.sizes})"
        )


def _by_shard(shard: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(shard, positions in the batch of its samples) for each shard of a batch, in shard order.

    >>> [(s, p.tolist()) for s, p in _by_shard(np.array([2, 0, 2]))]
    [(0, [1]), (2, [0, 2])]
    """
    if len(shard) == 0:
        return []
    order = np.argsort(shard, kind="stable")
    cuts = np.flatnonzero(np.diff(shard[order])) + 1
    return [(int(shard[g[0]]), g) for g in np.split(order, cuts)]
