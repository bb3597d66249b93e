"""ShardedDataset, what every dataset over a packed folder shares, and DecodingDataset."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import cached_property, partial
from typing import Any, ClassVar, TypedDict, Unpack

import numpy as np
import torch
from torch.utils.data import Dataset

from loaders.augment.batchcrop import crop_batch, samples_for
from loaders.augment.crops import Crop
from loaders.fields import declared
from loaders.fields.base import Field
from loaders.fields.image import CHECKED_BYTES, sides_problem
from loaders.read.buffers import BufferPool, new_batch
from loaders.read.decode import Pixels, Pool, run
from loaders.read.device import DeviceDecode
from loaders.read.loader import check_indices
from loaders.read.memory import SharedArrays
from loaders.read.store import ShardStore


class Remote(TypedDict, total=False):
    """`max_open` maps at a time (ShardStore); for a URL (loaders.remote) the node's `cache_dir`
    (default ~/.cache/prep), its `cache_limit` (bytes, or "200GB"), fsspec's `storage_options`.
    `version`: read the dataset as it was at that version (`prep log`), while its files are
    kept; `refresh`: `set_epoch` moves on to the newest version (else the one opened, always)."""

    max_open: int
    version: str | None
    refresh: bool
    cache_dir: str | os.PathLike[str] | None
    cache_limit: int | str | None
    storage_options: dict[str, Any] | None


class Decoding(Remote, total=False):
    """A DecodingDataset's options besides Remote's (see it)."""

    split: str | None
    crop: Crop | None
    decode: str
    threads: int | None


class ShardedDataset(Dataset[Any]):
    """A packed dataset at `root` (a folder or a URL), the shards of `split` (None: all), read a
    batch in `__getitems__`, or an item in `__getitem__` (`itemized`). Pickles small; size and
    epoch in shared memory. `outputs`: what a batch holds; `dicts`: a dict, else a tuple."""

    dicts: ClassVar[bool] = False
    itemized: ClassVar[bool] = False
    unsplit: ClassVar[tuple[str, str] | None] = None  # a missing split: what it holds, the fix

    def __init__(
        self, root: str | os.PathLike[str], *, split: str | None = None, **store: Unpack[Remote]
    ):
        self.refresh = bool(store.pop("refresh", False))
        # what a refresh opens again (kept only then: a pickled dataset stays under 1 KB)
        self._opened: tuple[Any, dict[str, Any]] | None = (
            (root, dict(store)) if self.refresh else None
        )
        self.store = ShardStore(root, **store)
        self.split = split
        if split is not None and not len(self._shards):
            root, have = self.store.root, self.store.manifest.splits
            if self.unsplit is None:
                raise ValueError(
                    f"{root} has no {split!r} split; it has {have or 'none'}. HINT: "
                    "prep pack --splits train,val or --val-fraction 0.1, or another split"
                )
            what, fix = self.unsplit
            raise ValueError(
                f"{root} has no {split!r} {what}; it has splits {sorted(have)}. HINT: {fix}"
            )
        self._now = torch.zeros(2, dtype=torch.int64).share_memory_()  # size, epoch
        if self.refresh:  # the version set_epoch chose, for the workers (a sha256's bytes)
            self.start_epoch = self._sizes_now  # a loader's sampler asks it as each pass starts
            self._version = torch.zeros(32, dtype=torch.uint8).share_memory_()
            self._version.numpy()[:] = np.frombuffer(bytes.fromhex(self.store.version), np.uint8)
        self._memory: dict[str, torch.Tensor] = {}  # in_memory's copy: name -> its bytes

    def check_fields(self, fields: Sequence[str], have: list[str]) -> None:
        """Refuse fields the dataset lacks (`have`), or none at all."""
        missing = [f for f in fields if f not in have]
        if missing or not fields:
            raise ValueError(f"{self.store.root} has no field {missing}; it has {have}")

    @cached_property
    def declared(self) -> dict[str, Field]:
        return declared(self.store.manifest)

    @cached_property
    def arrays(self) -> SharedArrays:  # the store's maps, or in_memory's copy of them
        return SharedArrays(self.store, self._memory)

    @cached_property
    def _shards(self) -> np.ndarray:
        """The manifest indices of the shards read, in order: the split's, or all."""
        m = self.store.manifest
        if self.split is None:
            return np.arange(len(m.shards))
        return np.flatnonzero(m.split_of() == self.split)

    @cached_property
    def _starts(self) -> np.ndarray:
        """Shard `_shards[k]` holds samples [_starts[k], _starts[k + 1])."""
        counts = self.store.manifest.counts()[self._shards]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    @cached_property
    def _alive(self) -> np.ndarray | None:
        """The samples read, as positions in the shards read, where `prep remove` hid some
        (the manifest's `removed`, indices over all shards); None: every sample."""
        m = self.store.manifest
        if not m.removed:
            return None
        counts = m.counts()
        starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        removed = np.asarray(m.removed, np.int64)
        shard = np.searchsorted(starts, removed, side="right") - 1
        k = np.full(len(counts), -1, np.int64)  # a shard's place among those read, -1: not read
        k[self._shards] = np.arange(len(self._shards))
        inside = k[shard] >= 0
        at = self._starts[k[shard[inside]]] + removed[inside] - starts[shard[inside]]
        return np.setdiff1d(np.arange(self._starts[-1], dtype=np.int64), at)

    @cached_property
    def _buffers(self) -> BufferPool:
        return BufferPool()

    def __getstate__(self) -> dict[str, Any]:
        """Without the cached properties: what the manifest gives is derived again."""
        cls = type(self)
        cached = [k for k in self.__dict__ if isinstance(getattr(cls, k, None), cached_property)]
        return {k: v for k, v in self.__dict__.items() if k not in cached}

    @property
    def epoch(self) -> int:
        return int(self._now[1])

    def set_epoch(self, epoch: int) -> None:
        """The epoch random crops and transforms draw from (with their seed and the index)."""
        if epoch < 0:
            raise ValueError(f"epoch {epoch} must be non-negative")
        if self.refresh and not self.store.current():
            self._open(None)
            self._version.numpy()[:] = np.frombuffer(bytes.fromhex(self.store.version), np.uint8)
        self._now[1] = epoch

    def _open(self, version: str | None) -> None:
        """Read `version` (None: the newest) from now on: what the manifest gives is derived
        again (a worker: the version its main process chose at set_epoch)."""
        if self._memory:  # its copy is of the version it opened
            raise ValueError(
                f"{self.store.root} has a new version, and in_memory=True holds the old one's "
                "arrays. HINT: make the dataset again, or pass refresh=False"
            )
        assert self._opened is not None  # refresh=True
        root, store = self._opened
        self.store = ShardStore(root, **{**store, "version": version})
        cls = type(self)
        for k in [k for k in self.__dict__ if isinstance(getattr(cls, k, None), cached_property)]:
            del self.__dict__[k]

    @property
    def shard_sizes(self) -> list[int]:
        if self._alive is not None:  # each shard's samples not removed
            k = np.searchsorted(self._starts, self._alive, side="right") - 1
            return np.bincount(k, minlength=len(self._shards)).tolist()
        return np.diff(self._starts).tolist()

    def __len__(self) -> int:
        return int(self._starts[-1]) if self._alive is None else len(self._alive)

    def _sizes_now(self, epoch: int) -> list[int]:
        """refresh=True: the shard sizes a loader's pass reads (set_epoch may have moved on)."""
        return self.shard_sizes

    def _checked(self, indices: Sequence[int] | np.ndarray, n: int | None = None) -> np.ndarray:
        """A batch's indices (into `n` items; default: len) checked, and the store (repacked?)."""
        if self.refresh:  # a worker follows its main process's set_epoch
            chosen = bytes(self._version.numpy()).hex()
            if chosen != self.store.version:
                self._open(chosen)
        self.store.check()
        return check_indices(indices, len(self) if n is None else n)

    def _find(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each sample's (of checked indices) shard, its manifest index, and index there."""
        if self._alive is not None:
            idx = self._alive[idx]
        k = np.searchsorted(self._starts, idx, side="right") - 1
        return self._shards[k], idx - self._starts[k]

    def _index(self, idx: np.ndarray) -> torch.Tensor:
        """A batch's "index" field: int64 (B,), in a buffer of the loader's, as any field's."""
        out = new_batch((len(idx),), torch.int64, self._buffers, "index")
        out.numpy()[:] = idx
        return out

    def _target_dtype(self, names: Sequence[str]) -> torch.dtype:
        """A target's batch dtype: float32 when one of arrays `names` holds floats, else int64."""
        arrays = self.store.manifest.arrays
        floats = any(np.dtype(arrays[n].dtype).kind == "f" for n in names if n in arrays)
        return torch.float32 if floats else torch.int64

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(getattr(self, "fields", ()))

    def source(self, index: int) -> str | None:
        """Sample `index`'s input, relative to the SRC it was packed from (None: not kept)."""
        n = int(self._starts[-1]) if self._alive is None else len(self._alive)
        shard, local = self._find(self._checked([index], n))
        return self.store.source(int(shard[0]), int(local[0]))

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> Any:
        return [self[i] for i in indices]  # `itemized`: shapes of their own, one at a time

    def _shown(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        shown = "".join(f", {k}={v!r}" for k, v in self._shown().items())
        return f"{type(self).__name__}({str(self.store.root)!r}{shown})"


class DecodingDataset(ShardedDataset):
    """A ShardedDataset with image fields: a batch of them is decoded (JPEG), cropped to each
    sample's box of `crop` and resized on a pool of `threads` threads (None: up to 4 cores), or
    decoded on the GPU (`decode="cuda"`, JPEG only: loaders.read.device), its boxes resized by
    one whole-batch crop (roi_align's sub-samples when shrinking) there."""

    fast_dct: bool = False  # JPEG on the CPU: the fast integer IDCT (loaders.read.decode)

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        split: str | None = None,
        crop: Crop | None = None,
        decode: str | DeviceDecode = "cpu",
        threads: int | None = None,
        **store: Unpack[Remote],
    ):
        super().__init__(root, split=split, **store)
        if not isinstance(decode, DeviceDecode) and decode not in ("cpu", "cuda"):
            raise ValueError(f"decode={decode!r} is not 'cpu', 'cuda' or a DeviceDecode")
        self.crop, self.decode, self._threads = crop, decode, threads
        self._device = DeviceDecode() if decode == "cuda" else decode

    @cached_property
    def _pool(self) -> Pool:
        return Pool(self._threads or min(4, len(os.sched_getaffinity(0))))

    @staticmethod
    def _on_device(device: DeviceDecode, p: Pixels, shape: tuple[int, ...]) -> torch.Tensor:
        """The JPEGs decoded on the device, then their boxes cropped by one whole-batch op."""
        x, hw = device.decode(p, shape[3])
        boxes, size = torch.from_numpy(p.boxes).to(x.device), (shape[1], shape[2])
        out = crop_batch(x, boxes, size, hw=hw, samples=samples_for(boxes, size))
        return out.contiguous(memory_format=torch.channels_last)

    def pixels(
        self, p: Pixels, shape: tuple[int, ...], key: str, mask: bool = False
    ) -> torch.Tensor:
        """Samples `p`, boxes resized: uint8 (B, C, H, W) views, or masks (B, H, W)."""
        big = p.jpeg and math.prod(shape) >= CHECKED_BYTES  # headers checked before it is made
        found = sides_problem(p.srcs, p.hw) if big else None
        if found is not None:
            p.check_crc(found[0])
            p.fail(*found)
        if isinstance(self._device, DeviceDecode) and p.jpeg:
            return self._device.run(partial(self._on_device, self._device, p, shape))
        out = new_batch(shape, torch.uint8, self._buffers, key)
        self._pool.map(partial(run, out.numpy(), p, mask, self.fast_dct), range(len(p.srcs)))
        return out if mask else out.permute(0, 3, 1, 2)
