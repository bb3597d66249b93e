"""SampleDataset: a dataset packed by `prep.pack_samples`, read as a dict of fields a batch."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, Unpack

import numpy as np
import torch

from loaders.augment.crops import Crop, whole
from loaders.datasets.base import DecodingDataset, Remote, ShardedDataset
from loaders.datasets.roles import (
    MIN_SIZE,
    crop_roles,
    drop_cut_boxes,
    read_crop,
    roles_of,
    transform,
)
from loaders.fields.base import RAGGED_POLICIES, Field
from loaders.fields.image import Image, hw_name
from loaders.fields.mask import Mask
from loaders.format import array_name
from loaders.read.batches import Batch, new_batch
from loaders.read.memory import by_shard
from loaders.read.store import DEFAULT_MAX_OPEN
from loaders.transforms import Compose


class SampleBatch(Batch):
    """A batch read at once: a dict of the fields (tensors, lists of str...). `collate_batch`
    returns the dict; a plain DataLoader's default collate gets it as a sequence of dicts."""

    def __init__(self, fields: dict[str, Any], n: int):
        self.tensors = fields  # type: ignore[assignment]
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j: int | str) -> Any:  # type: ignore[override]
        """Field `j`'s batch (a str), or sample `j` as a dict (an int)."""
        fields: dict[str, Any] = self.tensors  # type: ignore[assignment]
        return fields[j] if isinstance(j, str) else {k: v[j] for k, v in fields.items()}


class SampleDataset(DecodingDataset):
    """Samples of a `prep.pack_samples` dataset as dicts of `fields` (default: every field).

    Each field comes as its kind makes it (loaders.fields): fixed arrays stacked; ragged ones
    by `ragged` (one policy, or a dict of field -> policy): "pad" (padded with zeros to the
    batch's longest, with `NAME_len`), "list" (a tensor a sample) or "jagged" (a nested tensor);
    text as a list of str, JSON as a list of objects, bytes as a list of bytes; labels int64;
    images uint8 (B, C, H, W) at `size` (any of the dataset's sizes; `set_size` switches), with
    `crop=` as ImageShardDataset has it (required for mode keep; the boxes it leaves under
    1 px go as a pipeline's do, below) and `decode="cuda"` for JPEG.
    "index" gives each sample's dataset index. `in_memory=True` reads the fields into shared
    memory once. `root` may be a URL (see ShardedDataset). `split=` reads one split's shards.

    `transforms=`: a loaders.transforms.Compose run on each batch as it is read (in the
    loader's workers), drawing from (its seed, the dataset's epoch, index): the image field's
    pixels, with its mask, boxes and keypoints moved along and the boxes it leaves degenerate
    dropped with their per-box fields (loaders.datasets.roles says which). On an image
    packed with mode keep, without `crop=`, a leading RandomResizedCrop of the pipeline is read
    as the crop (the same boxes as the op's draws, each sample's own shape)."""

    dicts = True  # a batch is a dict of the fields

    def __init__(
        self,
        root: str | os.PathLike[str],
        fields: Sequence[str] | None = None,
        size: int | None = None,
        *,
        crop: Crop | None = None,
        ragged: str | Mapping[str, str] = "pad",
        decode: str = "cpu",
        threads: int | None = None,
        in_memory: bool = False,
        transforms: Compose | None = None,
        split: str | None = None,
        max_open: int = DEFAULT_MAX_OPEN,
        **remote: Unpack[Remote],
    ):
        super().__init__(root, split=split, max_open=max_open, **remote)
        have = [*self.declared, "index"]
        self.fields = tuple(self.declared if fields is None else fields)
        missing = [f for f in self.fields if f not in have]
        if missing or not self.fields:
            raise ValueError(f"{self.store.root} has no field {missing}; it has {have}")
        policies = {f: ragged for f in self.fields} if isinstance(ragged, str) else dict(ragged)
        bad = {f: p for f, p in policies.items() if p not in RAGGED_POLICIES or f not in have}
        if bad:
            raise ValueError(f"ragged={bad}: each a field of {have} -> one of {RAGGED_POLICIES}")
        if decode not in ("cpu", "cuda"):
            raise ValueError(f"decode={decode!r} is not 'cpu' or 'cuda'")
        if transforms is not None and crop is None and self._reads_keep_images():
            found = read_crop(transforms) if isinstance(transforms, Compose) else None
            crop, transforms = found if found is not None else (crop, transforms)
        self.policies, self.crop, self.decode, self._threads = policies, crop, decode, threads
        sized = [f for f in self.fields if f in self.declared and self._arrays_sized(f)]
        if sized:
            if size is None and len(self.sizes) != 1:
                raise ValueError(f"{self.store.root} has sizes {self.sizes}: pass size=")
            self.set_size(self.sizes[0] if size is None else size)
        self.transforms, self._roles, self._cut = transforms, None, None
        if transforms is not None:
            if not isinstance(transforms, Compose):
                raise TypeError(f"transforms= takes a loaders.transforms.Compose, not {transforms}")
            self._roles = roles_of(self.declared, self.fields, self.store.root)
        elif crop is not None:  # a pipeline drops the boxes it cuts away at its end: so does crop=
            self._cut = crop_roles(self.declared, self.fields, self.store.root)
        if in_memory:
            stored = [a for f in self.fields if f != "index" for a in self._arrays_of(f)]
            self.arrays.load(set(stored))

    def _arrays_sized(self, field: str) -> bool:
        """Whether a field stores an array a size (an image, or a field placed on one)."""
        return any(s.size is not None for s in self.declared[field].arrays(field))

    def _reads_keep_images(self) -> bool:
        """Whether a field read is an image packed with mode keep (its samples' own shapes)."""
        found = [self.declared.get(f) for f in self.fields]
        return any(isinstance(d, Image) and d.mode == "keep" for d in found)

    # -- what the manifest says: recomputed after unpickling, never pickled ------------------

    @cached_property
    def sizes(self) -> list[int]:
        return self.store.manifest.sizes()

    def _arrays_of(self, field: str) -> list[str]:
        f = self.declared[field]
        names = [array_name(s.field, s.size) for s in f.arrays(field)] + f.needs(field)
        return [n for n in names if n in self.store.manifest.arrays]  # needs: its image's sides

    # -- size ----------------------------------------------------------------------------------

    @property
    def size(self) -> int | None:
        return int(self._now[0]) if self.sizes else None

    def set_size(self, size: int) -> None:
        """Switch every image and mask field to `size` px (progressive resizing)."""
        if size not in self.sizes:
            raise ValueError(f"{self.store.root} has no size {size}; it has {self.sizes}")
        keep = [f for f, d in self.declared.items() if isinstance(d, Image) and d.mode == "keep"]
        if self.crop is None and any(f in self.fields for f in keep):
            raise ValueError(
                f"{self.store.root}: field {keep[0]} was packed with --mode keep: its samples "
                "have their own shapes. HINT: pass crop=CenterCrop(224) or "
                "RandomResizedCrop(224) (from loaders)"
            )
        self._now[0] = size

    @property
    def read_threads(self) -> int | None:
        """make_loader's reading threads: 2 when images are decoded on the CPU (as
        ImageShardDataset), so that one batch's bookkeeping overlaps the other's decoding."""
        images = [self.declared[f] for f in self.fields if f != "index"]
        decodes = any(
            isinstance(d, Image) and ("jpeg" in str(d.codec) or self.crop is not None)
            for d in images
        )
        return 2 if decodes and self.decode == "cpu" else None

    # -- access --------------------------------------------------------------------------------

    def __getitems__(self, indices: Sequence[int]) -> SampleBatch:
        self.store.check()  # a repacked folder: refuse it rather than mix two datasets
        shard, local = self._locate(indices)
        index = self._starts[np.searchsorted(self._shards, shard)] + local  # within the split
        reading = _Reading(self, by_shard(shard), local, index)
        out: dict[str, Any] = {}
        for f in self.fields:
            if f == "index":  # a buffer of the loader's ring, as every read field's
                out[f] = new_batch((len(local),), torch.int64, self._buffers, f)
                out[f].numpy()[:] = reading.index
            else:
                out |= self.declared[f].read(reading, f, self.policies.get(f, "pad"))
        if self._roles is not None:
            out = transform(self.transforms, out, self._roles, reading.index, self.epoch)
        elif self._cut is not None and self.crop is not None:
            out = drop_cut_boxes(out, self._cut, len(local), self.crop.size, MIN_SIZE)
        return SampleBatch(out, len(local))

    def __repr__(self) -> str:
        return (
            f"SampleDataset({str(self.store.root)!r}, fields={self.fields}, samples={len(self)}, "
            f"shards={len(self._starts) - 1}, sizes={self.sizes})"
        )


class ArrayReading:
    """One batch being read of any samples dataset (SampleDataset, AudioDataset): the arrays a
    field's `read` asks for (loaders.fields.base.Reading), without images or crops."""

    size: int | None = None

    def __init__(
        self,
        ds: ShardedDataset,
        groups: list[tuple[int, np.ndarray]],
        local: np.ndarray,
        index: np.ndarray,
    ):
        self.ds, self.groups, self.local, self.index = ds, groups, local, index

    def values(self, name: str) -> np.ndarray:
        spec = self.ds.store.manifest.arrays[name]
        out = np.empty((len(self.local), *spec.shape), dtype=spec.dtype)
        self.ds.gather(out, name, self.groups, self.local)
        return out

    def pieces(self, name: str) -> list[np.ndarray]:
        return self.ds.arrays.samples(name, self.groups, self.local)[0]

    def where(self, name: str) -> Sequence[str]:
        return self.ds.arrays.samples(name, self.groups, self.local)[1]

    def crops(self, image: str) -> tuple[np.ndarray, tuple[int, int]] | None:
        return None

    def images(self, field: Field, name: str) -> torch.Tensor:
        raise ValueError(
            f"{self.ds.store.root}: field {name} holds images, which {type(self.ds).__name__} "
            "does not decode. HINT: read it with SampleDataset"
        )


class _Reading(ArrayReading):
    """One batch of a SampleDataset being read: its arrays, and its images at the batch's size
    with the dataset's crop."""

    ds: SampleDataset

    def __init__(
        self,
        ds: SampleDataset,
        groups: list[tuple[int, np.ndarray]],
        local: np.ndarray,
        index: np.ndarray,
    ):
        super().__init__(ds, groups, local, index)
        self.size = ds.size  # read once: set_size may run between batches, never within one
        self._boxes: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # image -> (hw, boxes)

    def _hw_boxes(self, image: str) -> tuple[np.ndarray, np.ndarray]:
        """The batch's stored (h, w) of image field `image`, and its crop boxes: once a batch,
        shared by the image and its masks."""
        found = self._boxes.get(image)
        if found is None:
            size, ds = self.size or 0, self.ds
            keep = hw_name(image, size) in ds.store.manifest.arrays
            hw = self.values(hw_name(image, size)).astype(np.int64) if keep else None
            hw = np.full((len(self.local), 2), size, dtype=np.int64) if hw is None else hw
            boxes = whole(hw) if ds.crop is None else ds.crop.boxes(self.index, hw, ds.epoch)
            found = self._boxes[image] = hw, boxes
        return found

    def crops(self, image: str) -> tuple[np.ndarray, tuple[int, int]] | None:
        if self.ds.crop is None:
            return None
        return self._hw_boxes(image)[1], self.ds.crop.size

    def images(self, field: Field, name: str) -> torch.Tensor:
        """Field `name` (an Image or a Mask) at the batch's size: uint8 (B, C, H, W) views of
        HWC batches for images, (B, H, W) for masks."""
        ds, size, b = self.ds, self.size or 0, len(self.local)
        mask = isinstance(field, Mask)
        arr = array_name(name, size)
        spec = ds.store.manifest.arrays[arr]
        if not spec.ragged and ds.crop is None:  # stored as returned: a copy out of the map
            out = new_batch((b, *spec.shape), torch.uint8, ds._buffers, arr)
            ds.gather(out.numpy(), arr, self.groups, self.local)
            return out if mask else out.permute(0, 3, 1, 2)
        hw, boxes = self._hw_boxes(field.image if isinstance(field, Mask) else name)
        jpeg = spec.codec == "jpeg"
        crcs = self.values(array_name(f"{name}_crc", size)).astype(np.int64) if jpeg else None
        return ds.decoded(arr, self.groups, self.local, hw, boxes, crcs, mask)
