"""ImageShardDataset: packed image shards as a map-style torch Dataset of uint8 tensors."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import Unpack

import numpy as np
import torch

from loaders.augment.crops import Crop, whole
from loaders.datasets.base import DecodingDataset, Remote
from loaders.format import array_name
from loaders.format.kinds import FIELDS
from loaders.read.batches import Batch, new_batch
from loaders.read.memory import by_shard
from loaders.read.store import DEFAULT_MAX_OPEN

CROPPED = ("image", "mask")  # the fields a crop= applies to


class ImageShardDataset(DecodingDataset):
    """Samples of a packed image dataset, as a tuple in `fields` order, each as its field in
    `loaders.format.kinds.FIELDS` makes it:

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
    forked or spawned, map that one copy instead of copying it or reading the disk. JPEG sizes
    stay compressed there (about 1/7 of their pixels' RAM at q90).

    `crop=` (`CenterCrop(s)`, `RandomResizedCrop(s, scale, ratio, seed)`: loaders.augment.crops)
    crops images and masks to one shape: required for `--mode keep` sizes. Boxes depend on (seed,
    epoch, index): call `set_epoch(e)`. JPEG is decoded on `threads` threads (default: up to 4
    cores; one in a DataLoader worker), or by `decode="cuda"` on the GPU, a batch at once in
    the main process (the `gpu` extra). Bad bytes raise FormatError naming shard and sample.

    `root` may be an fsspec URL (s3://, gs://, http(s)://): shard files are fetched once per
    node into `cache_dir` (default ~/.cache/prep), verified, and mapped; `cache_limit` (bytes or
    "200GB") bounds it; `storage_options` passes through to fsspec (see loaders.remote).

    `split="val"` reads one split of a dataset packed with `--splits` or `--val-fraction` (its
    indices run from 0 over that split's shards); None reads every shard.
    """

    kind = "images"

    def __init__(
        self,
        root: str | os.PathLike[str],
        size: int | None = None,
        fields: Sequence[str] = ("image", "label"),
        in_memory: bool = False,
        *,
        crop: Crop | None = None,
        decode: str = "cpu",
        threads: int | None = None,
        fast_dct: bool = False,
        split: str | None = None,
        max_open: int = DEFAULT_MAX_OPEN,
        **remote: Unpack[Remote],
    ):
        super().__init__(root, split=split, max_open=max_open, **remote)
        if split is not None and not self._shards:
            have = sorted({str(s.split) for s in self.store.manifest.shards if s.split})
            raise ValueError(
                f"{self.store.root} has no {split!r} split; it has "
                f"{have or 'none'}. HINT: prep pack --splits train,val or --val-fraction 0.1"
            )
        self.fields = tuple(fields)
        have = [*(f for f in self.store.manifest.fields() if f != "source"), "index"]  # source(i)
        missing = [f for f in self.fields if f not in have]
        if missing or not self.fields:
            hint = ". HINT: ds.source(i) gives a sample's input file" if "source" in missing else ""
            raise ValueError(f"{self.store.root} has no field {missing}; it has {have}{hint}")
        if size is None:
            if len(self.sizes) != 1:
                raise ValueError(f"{self.store.root} has sizes {self.sizes}: pass size=")
            size = self.sizes[0]
        if decode not in ("cpu", "cuda"):
            raise ValueError(f"decode={decode!r} is not 'cpu' or 'cuda'")
        self.crop, self.decode, self._threads = crop, decode, threads
        self.fast_dct = fast_dct  # JPEG: libjpeg-turbo's fast integer IDCT (README: Fast DCT)
        self.set_size(size)
        if in_memory:  # every size of the requested fields, so that set_size still works
            stored = [f for f in self.fields if FIELDS[f].codecs]
            stored += ["hw", "crc"] if set(stored) & set(CROPPED) else []
            self.arrays.load({self._name(f, s) for f in stored for s in self.sizes})

    # -- what the manifest says: recomputed after unpickling, never pickled ------------------

    @cached_property
    def sizes(self) -> list[int]:
        return self.store.manifest.sizes()

    @cached_property
    def classes(self) -> list[str] | None:
        return self.store.manifest.classes

    # -- size ----------------------------------------------------------------------------------

    @property
    def read_threads(self) -> int | None:
        """make_loader's default reading threads for this dataset: 2 when batches are decoded
        on the CPU (JPEG, crops), so that one batch's bookkeeping overlaps the decoding of the
        other on the pool's threads (bench rows 13b, 13c); None: the loader's default."""
        decodes = any(self._decoded(f, self.size) for f in self.fields)
        return 2 if decodes and self.decode == "cpu" else None

    @property
    def size(self) -> int:
        return int(self._now[0])

    def set_size(self, size: int) -> None:
        """Switch every sized field to `size` px (progressive resizing between epochs)."""
        if size not in self.sizes:
            raise ValueError(f"{self.store.root} has no size {size}; it has {self.sizes}")
        if self.crop is None and array_name("hw", size) in self.store.manifest.arrays:
            raise ValueError(
                f"{self.store.root} was packed with --mode keep at {size} px: its samples have "
                "their own shapes. HINT: pass crop=CenterCrop(224) or RandomResizedCrop(224) "
                "(from loaders)"
            )
        self._now[0] = size

    # -- storage -------------------------------------------------------------------------------

    def _name(self, field: str, size: int | None) -> str:
        return array_name(field, size if FIELDS[field].sized else None)

    # -- access --------------------------------------------------------------------------------

    def _out(self, field: str, batch: int, size: int) -> torch.Tensor:
        shape = self.store.manifest.arrays[self._name(field, size)].shape
        if self.crop is not None and field in CROPPED:
            shape = (*self.crop.size, *shape[2:])
        dtype = getattr(torch, FIELDS[field].out_dtype)
        return new_batch((batch, *shape), dtype, self._buffers, field)

    def _decoded(
        self, field: str, size: int
    ) -> bool:  # cropped, ragged or JPEG: loaders.read.decode
        spec = self.store.manifest.arrays.get(self._name(field, size))
        return field in CROPPED and (self.crop is not None or (spec is not None and spec.ragged))

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        self.store.check()  # a repacked folder: refuse it rather than mix two datasets
        shard, local = self._locate(indices)
        size = self.size  # read once: set_size may run between batches, never within one
        groups = by_shard(shard)
        # The dataset's index of each sample: its shard's place among the split's shards.
        index = self._starts[np.searchsorted(self._shards, shard)] + local
        boxes: np.ndarray | None = None
        outs = []
        for field in self.fields:
            if field == "index":
                out = new_batch((len(shard),), torch.int64, self._buffers, field)
                out.numpy()[:] = index
                outs.append(out)
                continue
            if not self._decoded(field, size):
                out = self._out(field, len(shard), size)
                self.gather(out.numpy(), self._name(field, size), groups, local)
                outs.append(FIELDS[field].to_tensor(out))
                continue
            if boxes is None:  # once a batch: the image and its mask share their boxes
                stored = self._per_sample("hw", size, groups, local)  # mode keep: their own
                hw = np.full((len(local), 2), size) if stored is None else stored
                boxes = whole(hw) if self.crop is None else self.crop.boxes(index, hw, self.epoch)
            outs.append(self._decode_field(field, size, groups, local, hw, boxes))
        return Batch(tuple(outs))

    def _per_sample(
        self, field: str, size: int, groups: list[tuple[int, np.ndarray]], local: np.ndarray
    ) -> np.ndarray | None:
        """The batch's int64 values of `field` (hw, crc) at `size`; None: the dataset has none."""
        spec = self.store.manifest.arrays.get(array_name(field, size))
        if spec is None:
            return None
        out = np.empty((len(local), *spec.shape), dtype=np.int64)
        self.gather(out, array_name(field, size), groups, local)
        return out

    def _decode_field(
        self,
        field: str,
        size: int,
        groups: list[tuple[int, np.ndarray]],
        local: np.ndarray,
        hw: np.ndarray,
        boxes: np.ndarray,
    ) -> torch.Tensor:
        """A batch of `field` (image or mask) decoded, cropped and resized (DecodingDataset)."""
        name = self._name(field, size)
        jpeg = self.store.manifest.arrays[name].codec == "jpeg"
        crcs = self._per_sample("crc", size, groups, local) if jpeg else None
        return self.decoded(name, groups, local, hw, boxes, crcs, field == "mask")

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        return self.__getitems__([index])[0]

    def source(self, index: int) -> str | None:
        """Sample `index`'s input file, relative to SRC (None: packed before prep stored it)."""
        return self.store.source(*(int(a[0]) for a in self._locate([index])))  # shard, sample

    def __repr__(self) -> str:
        return (
            f"ImageShardDataset({str(self.store.root)!r}, size={self.size}, fields={self.fields}, "
            f"split={self.split!r}, "
            f"samples={len(self)}, shards={len(self._starts) - 1}, sizes={self.sizes})"
        )
