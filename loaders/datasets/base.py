"""ShardedDataset: what every dataset over a packed folder shares: its shard store (a folder or a
URL), the shards it reads (all, or one split's), the shard lookup of an index, the epoch (and
size) that reach DataLoader workers, and pickling without what the manifest gives.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar, TypedDict, Unpack

import numpy as np
import torch
from torch.utils.data import Dataset

from loaders.augment.crops import Crop
from loaders.fields import declared
from loaders.fields.base import Field
from loaders.read.batches import BufferPool, check_indices, new_batch
from loaders.read.decode import check_sides, fill, jobs_for
from loaders.read.memory import SharedArrays
from loaders.read.pool import Pool
from loaders.read.store import DEFAULT_MAX_OPEN, ShardStore, pickled_state


class Remote(TypedDict, total=False):
    """What a dataset at a URL takes besides it (loaders.remote): shard files are fetched once
    per node into `cache_dir` (default ~/.cache/prep), verified and mapped; `cache_limit`
    (bytes, or "200GB") bounds the cache; `storage_options` pass through to fsspec."""

    cache_dir: str | os.PathLike[str] | None
    cache_limit: int | str | None
    storage_options: dict[str, Any] | None


class ShardedDataset(Dataset[Any]):
    """A packed dataset at `root` (a folder or an fsspec URL: see Remote), read from its shards
    of split `split` (None: every shard; a split it lacks is a ValueError naming those it has).
    Subclasses read a batch in `__getitems__` (`__getitem__` is then a batch of one), or, for
    samples of shapes of their own (whole volumes, documents), an item in `__getitem__` and a list
    of them in `__getitems__`, as torch's default does.

    Shard files are mapped lazily by `self.store`, never pickled: the object pickles to a few
    hundred bytes for spawn workers. The size and epoch live in shared memory so that
    `set_epoch` (and a subclass's size) reach persistent DataLoader workers.

    `outputs` names what a batch holds, in its order (MixedDataset mixes by them); `dicts`:
    batches are dicts of them, else tuples; `itemized`: items of shapes of their own, read
    one at a time (whole volumes, documents)."""

    dicts: ClassVar[bool] = False
    itemized: ClassVar[bool] = False

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        split: str | None = None,
        max_open: int = DEFAULT_MAX_OPEN,
        **remote: Unpack[Remote],
    ):
        self.store = ShardStore(root, max_open=max_open, **remote)
        self.split = split
        if split is not None and not len(self._shards):
            raise ValueError(self.no_split(split))
        self._now = torch.zeros(2, dtype=torch.int64).share_memory_()  # size, epoch
        self._memory: dict[str, torch.Tensor] = {}  # in_memory's copy: name -> its bytes

    def no_split(self, split: str) -> str:
        """The error of a dataset opened on a split it has no shard of, with its fix."""
        have = self.store.manifest.splits
        return (
            f"{self.store.root} has no {split!r} split; it has {have or 'none'}. HINT: "
            "prep pack --splits train,val or --val-fraction 0.1, or another split"
        )

    @cached_property
    def declared(self) -> dict[str, Field]:
        """Every field of the dataset, as its manifest declares it (loaders.fields)."""
        return declared(self.store.manifest)

    @cached_property
    def arrays(self) -> SharedArrays:  # the store's maps, or in_memory's copy of them
        return SharedArrays(self.store, self._memory)

    @cached_property
    def _shards(self) -> np.ndarray:
        """The manifest indices of the shards the dataset reads, in order: its split's, or all
        (a column of the shard index: no record is read)."""
        m = self.store.manifest
        if self.split is None:
            return np.arange(len(m.shards))
        return np.flatnonzero(m.split_of() == self.split)

    @cached_property
    def _starts(self) -> np.ndarray:
        """Cumulative sample counts: the k-th shard read (`_shards[k]`) holds samples
        [_starts[k], _starts[k + 1])."""
        counts = self.store.manifest.counts()[self._shards]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    @cached_property
    def _buffers(self) -> BufferPool:
        return BufferPool()

    def __getstate__(self) -> dict[str, Any]:
        return pickled_state(self)

    @property
    def epoch(self) -> int:
        return int(self._now[1])

    def set_epoch(self, epoch: int) -> None:
        """The epoch random crops and transforms draw from (with their seed and the index)."""
        if epoch < 0:
            raise ValueError(f"epoch {epoch} must be non-negative")
        self._now[1] = epoch

    @property
    def shard_sizes(self) -> list[int]:
        """Samples per shard, in order (for shard-aware samplers)."""
        return np.diff(self._starts).tolist()

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _locate(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Each sample's shard (its manifest index, as the store and `gather` take it), and its
        index in that shard."""
        idx = check_indices(indices, int(self._starts[-1]))
        k = np.searchsorted(self._starts, idx, side="right") - 1
        return self._shards[k], idx - self._starts[k]

    def gather(
        self, dst: np.ndarray, name: str, groups: list[tuple[int, np.ndarray]], local: np.ndarray
    ) -> None:
        """Samples `local` of array `name` into `dst`, one shard's map at a time."""
        if len(groups) == 1:
            arr = self.arrays.array(groups[0][0], name)
            if dst.dtype == arr.dtype:
                # The whole batch in one shard: one vectorised read, straight into the output.
                # mode="clip": the indices are checked already, and the default ("raise")
                # buffers the whole output before copying it into `dst`.
                np.take(arr, local, axis=0, out=dst, mode="clip")
                return
        for s, pos in groups:
            arr = self.arrays.array(s, name)
            if dst[:1].nbytes > 4096:
                # Big samples: copy each once into place (a gather per shard followed by a
                # scatter would copy every pixel twice).
                for j, k in zip(pos.tolist(), local[pos].tolist(), strict=True):
                    dst[j] = arr[k]
            else:
                dst[pos] = arr[local[pos]]

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(getattr(self, "fields", ()))

    def source(self, index: int) -> str | None:
        """Sample `index`'s input, relative to the SRC it was packed from, as its field
        `source` keeps it (None: a dataset packed without one)."""
        self.store.check()
        return self.store.source(*(int(a[0]) for a in self._locate([index])))  # shard, sample

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> Any:
        raise NotImplementedError


class DecodingDataset(ShardedDataset):
    """A ShardedDataset with image fields: a batch of them is decoded (JPEG), cropped and resized
    on a pool of threads, or decoded on the GPU (ImageShardDataset, SampleDataset)."""

    crop: Crop | None = None  # each sample's box, resized to one shape (loaders.augment.crops)
    decode: str = "cpu"  # JPEG: "cuda" decodes a batch with nvJPEG (loaders.read.gpu_decode)
    _threads: int | None = None  # JPEG decoding threads (None: up to 4 cores)
    fast_dct: bool = False  # JPEG on the CPU: the fast integer IDCT (loaders.read.decode)

    @cached_property
    def _pool(self) -> Pool:
        return Pool(self._threads or min(4, len(os.sched_getaffinity(0))))

    def decoded(
        self,
        name: str,
        groups: list[tuple[int, np.ndarray]],
        local: np.ndarray,
        hw: np.ndarray,
        boxes: np.ndarray,
        crcs: np.ndarray | None,
        mask: bool = False,
    ) -> torch.Tensor:
        """Array `name`'s samples (images HWC, or masks) through loaders.read.decode: each sample's
        bytes or pixels decoded (JPEG, its `crcs` checked first), cropped to its box and resized
        to the crop's size (or the stored size): uint8 (B, C, H, W) images, channels-last
        views of their HWC batch (on the GPU for decode="cuda"), or (B, H, W) masks."""
        spec = self.store.manifest.arrays[name]
        srcs, places = self.arrays.samples(name, groups, local)
        jpeg = spec.codec == "jpeg"
        shape = spec.shape if self.crop is None else (*self.crop.size, *spec.shape[2:])
        if jpeg:  # the headers' sides, before a batch of the manifest's is allocated
            check_sides(srcs, hw, crcs, places, len(local) * math.prod(shape))
        if self.decode == "cuda" and jpeg:
            from loaders.read.gpu_decode import decode_cuda  # torchvision, imported only here

            out_hw = (shape[0], shape[1])
            return decode_cuda(srcs, crcs, hw, boxes, out_hw, spec.shape[-1], places)
        out = new_batch((len(local), *shape), torch.uint8, self._buffers, spec.field)
        jobs = jobs_for(out.numpy(), srcs, jpeg, hw, boxes, crcs, places, mask, self.fast_dct)
        fill(jobs, self._pool)
        return out if mask else out.permute(0, 3, 1, 2)
