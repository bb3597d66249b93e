"""SampleDataset (`prep.pack_samples`: a dict of fields a batch) and ImageShardDataset; the
roles of fields in transforms are loaders.datasets.roles, AudioDataset loaders.datasets.audio."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, Unpack

import numpy as np
import torch

from loaders.augment.crops import whole
from loaders.datasets.base import Decoding, DecodingDataset, ShardedDataset
from loaders.datasets.roles import crop_roles, drop_cut_boxes, read_crop, roles_of, transform
from loaders.fields.base import RAGGED_POLICIES, Field
from loaders.fields.image import Image, hw_name
from loaders.fields.mask import Mask
from loaders.format import array_name
from loaders.read.buffers import new_batch
from loaders.read.decode import Pixels
from loaders.read.loader import Batch
from loaders.read.store import by_shard
from loaders.transforms import Compose

WIDE = (torch.uint16, torch.uint32, torch.uint64)  # as int64: torch barely computes with them


class SampleBatch(Batch):
    """A batch as a dict of the fields; to default_collate, a sequence of dicts."""

    def __init__(self, fields: dict[str, Any], n: int):
        self.tensors, self.n = fields, n  # type: ignore[assignment]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j: int | str) -> Any:  # type: ignore[override]
        """Field `j`'s batch (a str), or sample `j` as a dict (an int)."""
        fields: dict[str, Any] = self.tensors  # type: ignore[assignment]
        return fields[j] if isinstance(j, str) else {k: v[j] for k, v in fields.items()}


class SampleDataset(DecodingDataset):
    """Samples as dicts of `fields` (default: all), each as its kind reads it (loaders.fields);
    "index": each sample's dataset index. Ragged fields follow `ragged` (a policy, or field ->
    policy): "pad" (with `NAME_len`), "list" or "jagged". Images are uint8 (B, C, H, W) at
    `size` (`set_size` switches), cropped by `crop=` (required for mode keep). `in_memory`:
    the fields read into shared memory once. `transforms=`: a Compose run on each batch read
    (roles: below); on a mode keep image, its leading RandomResizedCrop is the crop.
    `exclude=`: skip samples, "issues:blur,dark" (prep issues' flags) or a file of indices
    (.npy, or one a line); the others keep their order, "index" still the dataset's.

    Examples:
        >>> from loaders import CenterCrop, SampleDataset, make_loader
        >>> ds = SampleDataset("data/demo-samples", fields=("image", "boxes", "labels", "caption"),
        ...                    crop=CenterCrop(224))
        >>> batch = next(iter(make_loader(ds, batch_size=4)))
        >>> batch["image"].shape, type(batch["caption"][0]).__name__
        (torch.Size([4, 3, 224, 224]), 'str')
    """

    dicts = True
    _kept: np.ndarray | None = None  # exclude=: the dataset indices read, ascending

    def __init__(
        self,
        root: str | os.PathLike[str],
        fields: Sequence[str] | None = None,
        size: int | None = None,
        *,
        ragged: str | Mapping[str, str] = "pad",
        in_memory: bool = False,
        transforms: Compose | None = None,
        exclude: str | os.PathLike[str] | None = None,
        **opts: Unpack[Decoding],
    ):
        super().__init__(root, **opts)
        if exclude is not None:
            self._kept = np.flatnonzero(~self._excluded(os.fspath(exclude)))
        have = [*self.declared, "index"]
        self.fields = tuple(self.declared if fields is None else fields)
        self.check_fields(self.fields, have)
        policies = {f: ragged for f in self.fields} if isinstance(ragged, str) else dict(ragged)
        bad = {f: p for f, p in policies.items() if p not in RAGGED_POLICIES or f not in have}
        if bad:
            raise ValueError(f"ragged={bad}: each a field of {have} -> one of {RAGGED_POLICIES}")
        self.policies = policies
        if transforms is not None and not isinstance(transforms, Compose):
            raise TypeError(f"transforms= takes a loaders.transforms.Compose, not {transforms}")
        if transforms is not None and self.crop is None and self._keep_images():
            found = read_crop(transforms)
            self.crop, transforms = found if found is not None else (None, transforms)
        read = {f: self.declared[f] for f in self.fields if f != "index"}
        if any(s.size is not None for f, d in read.items() for s in d.arrays(f)):  # images
            if size is None and len(self.sizes) != 1:
                raise ValueError(f"{self.store.root} has sizes {self.sizes}: pass size=")
            self.set_size(self.sizes[0] if size is None else size)
        self.transforms, self._roles, self._cut = transforms, None, None
        if transforms is not None:
            self._roles = roles_of(read, self.fields, self.store.root)
        elif self.crop is not None:  # a pipeline drops the boxes it cuts away: so does crop=
            self._cut = crop_roles(read, self.store.root)
        if in_memory:  # with what a field needs of others (a mask: its image's sides)
            names = {array_name(s.field, s.size) for f, d in read.items() for s in d.arrays(f)}
            self.arrays.load(names | {n for f, d in read.items() for n in d.needs(f)})

    def _excluded(self, exclude: str) -> np.ndarray:
        """bool (N,): the samples `exclude` names."""
        from loaders.fields.scores import excluded_by, read_indices

        n = int(self._starts[-1])
        if not exclude.startswith("issues:"):
            idx, out = read_indices(exclude), np.zeros(n, bool)
            if len(idx) and not (idx.min() >= 0 and idx.max() < n):
                raise ValueError(f"exclude={exclude!r} names indices beyond 0..{n - 1}")
            out[idx] = True
            return out
        reading = ArrayReading(self, np.arange(n))
        return excluded_by(self.declared, self.store.manifest.extra, reading.values, exclude)

    def __len__(self) -> int:
        return super().__len__() if self._kept is None else len(self._kept)

    @property
    def shard_sizes(self) -> list[int]:
        if self._kept is None:
            return super().shard_sizes
        return np.diff(np.searchsorted(self._kept, self._starts)).tolist()

    def _checked(self, indices: Sequence[int] | np.ndarray, n: int | None = None) -> np.ndarray:
        """exclude=: positions among the kept samples -> their dataset indices."""
        idx = super()._checked(indices, n)
        return idx if self._kept is None or n is not None else self._kept[idx]

    def _keep_images(self) -> list[str]:
        """The image fields read that were packed with mode keep (their own shapes)."""
        found = {f: self.declared.get(f) for f in self.fields}
        return [f for f, d in found.items() if isinstance(d, Image) and d.mode == "keep"]

    @cached_property
    def sizes(self) -> list[int]:
        return self.store.manifest.sizes()

    @property
    def size(self) -> int | None:
        return int(self._now[0]) if self.sizes else None

    def set_size(self, size: int) -> None:
        """Switch every image and mask field to `size` px (progressive resizing)."""
        if size not in self.sizes:
            raise ValueError(f"{self.store.root} has no size {size}; it has {self.sizes}")
        keep = self._keep_images()
        if self.crop is None and keep:
            raise ValueError(
                f"{self.store.root}: field {keep[0]} was packed with --mode keep: its samples "
                "have their own shapes. HINT: pass crop=CenterCrop(224) or "
                "RandomResizedCrop(224) (from loaders)"
            )
        self._now[0] = size

    @property
    def read_threads(self) -> int | None:
        """make_loader's threads: 2 for images decoded on the CPU (bookkeeping beside decoding)."""
        images = [d for f in self.fields if isinstance(d := self.declared.get(f), Image)]
        decodes = any("jpeg" in str(d.codec) for d in images) or bool(images and self.crop)
        return 2 if decodes and self.decode == "cpu" else None

    def __getitems__(self, indices: Sequence[int]) -> SampleBatch:
        index = self._checked(indices)
        reading = ArrayReading(self, index)
        out: dict[str, Any] = {}
        for f in self.fields:
            if f == "index":
                out[f] = self._index(index)
            else:
                out |= self.declared[f].read(reading, f, self.policies.get(f, "pad"))
        if self._roles is not None:
            out = transform(self.transforms, out, self._roles, index, self.epoch)
        elif self._cut is not None and self.crop is not None:
            out = drop_cut_boxes(out, self._cut, len(index), self.crop.size)
        return SampleBatch(out, len(index))

    def _shown(self) -> dict[str, Any]:
        shards = len(self._starts) - 1
        return {"fields": self.fields, "samples": len(self), "shards": shards, "sizes": self.sizes}


class ImageShardDataset(SampleDataset):
    """A SampleDataset of an image pack whose batches are tuples in `fields` order: "image"
    uint8 (C, H, W), a channels-last view of the HWC storage; "mask" uint8 (H, W) class ids;
    "label" int64 (); "orig_size" int64 (2,), the source's (h, w); "index" int64 ().
    `fast_dct`: JPEG through libjpeg-turbo's fast integer IDCT (docs/images.md, "Fast DCT").
    Use `make_loader` (or `collate_fn=collate_batch`) to keep the batched read.

    Examples:
        >>> from loaders import ImageShardDataset
        >>> ds = ImageShardDataset("data/demo-packed", size=128, fields=("image", "label"))
        >>> image, label = ds[0]
        >>> image.shape, image.dtype
        (torch.Size([3, 128, 128]), torch.uint8)
    """

    dicts = False

    def __init__(
        self,
        root: str | os.PathLike[str],
        size: int | None = None,
        fields: Sequence[str] = ("image", "label"),
        in_memory: bool = False,
        *,
        fast_dct: bool = False,
        exclude: str | os.PathLike[str] | None = None,
        **opts: Unpack[Decoding],
    ):
        if "source" in fields:
            raise ValueError(
                f"{root} has no field ['source'] to batch: its paths are bytes, not a tensor. "
                "HINT: ds.source(i) gives sample i's"
            )
        self.fast_dct = fast_dct
        super().__init__(root, fields, size, in_memory=in_memory, exclude=exclude, **opts)

    @property
    def classes(self) -> list[str] | None:
        return self.store.manifest.classes

    def __getitems__(self, indices: Sequence[int]) -> Batch:  # type: ignore[override]
        batch = super().__getitems__(indices).tensors
        return Batch(tuple(batch[f] for f in self.fields))  # type: ignore[call-overload]

    def _shown(self) -> dict[str, Any]:
        return {"size": self.size, "fields": self.fields, "split": self.split, **super()._shown()}


class ArrayReading:
    """One batch being read (loaders.fields.Reading): arrays, and a SampleDataset's images."""

    def __init__(self, ds: ShardedDataset, index: np.ndarray, at: np.ndarray | None = None):
        """`index`: the batch's checked indices; `at`: the samples read (default: `index`)."""
        shard, self.local = ds._find(index if at is None else at)
        self.ds, self.groups, self.index = ds, by_shard(shard), index
        # Read once: set_size may run between batches, never within one
        self.size = ds.size if isinstance(ds, SampleDataset) else None
        self._boxes: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # image -> (hw, boxes)

    def values(self, name: str) -> np.ndarray:
        spec = self.ds.store.manifest.arrays[name]
        out = np.empty((len(self.local), *spec.shape), dtype=spec.dtype)
        self.gather(out, name)
        return out

    def gather(self, dst: np.ndarray, name: str) -> None:
        """The batch's samples of array `name` into `dst`, one shard's map at a time."""
        groups, local, arrays = self.groups, self.local, self.ds.arrays
        for s, pos in groups:
            arr = arrays.array(s, name)
            p0, n = int(pos[0]), len(pos)
            if dst.dtype == arr.dtype and int(pos[-1]) - p0 + 1 == n:
                # A run of the batch (one shard's whole batch, or a read in order): one
                # vectorised read into place. mode="clip": the indices are checked, and "raise"
                # buffers the whole output before copying it.
                np.take(arr, local[pos], axis=0, out=dst[p0 : p0 + n], mode="clip")
            elif dst[:1].nbytes > 4096:
                # Big samples copied once each into place (a gather, then a scatter, twice)
                for j, k in zip(pos.tolist(), local[pos].tolist(), strict=True):
                    dst[j] = arr[k]
            else:
                dst[pos] = arr[local[pos]]

    def pieces(self, name: str) -> list[np.ndarray]:
        return self.ds.arrays.samples(name, self.groups, self.local)[0]

    def where(self, name: str) -> Sequence[str]:
        return self.ds.arrays.samples(name, self.groups, self.local)[1]

    def _hw_boxes(self, ds: SampleDataset, image: str) -> tuple[np.ndarray, np.ndarray]:
        """Image field `image`'s stored (h, w) and crop boxes: once a batch, for its masks too."""
        found = self._boxes.get(image)
        if found is None:
            size = self.size or 0
            keep = hw_name(image, size) in ds.store.manifest.arrays
            hw = self.values(hw_name(image, size)).astype(np.int64) if keep else None
            hw = np.full((len(self.local), 2), size, dtype=np.int64) if hw is None else hw
            boxes = whole(hw) if ds.crop is None else ds.crop.boxes(self.index, hw, ds.epoch)
            found = self._boxes[image] = hw, boxes
        return found

    def crops(self, image: str) -> tuple[np.ndarray, tuple[int, int]] | None:
        ds = self.ds
        if not isinstance(ds, SampleDataset) or ds.crop is None:
            return None
        return self._hw_boxes(ds, image)[1], ds.crop.size

    def images(self, field: Field, name: str) -> torch.Tensor:
        ds, size, b = self.ds, self.size or 0, len(self.local)
        if not isinstance(ds, SampleDataset):
            raise ValueError(
                f"{ds.store.root}: field {name} holds images, which {type(ds).__name__} "
                "does not decode. HINT: read it with SampleDataset"
            )
        mask = isinstance(field, Mask)
        arr = array_name(name, size)
        spec = ds.store.manifest.arrays[arr]
        if not spec.ragged and ds.crop is None:  # stored as returned: a copy out of the map
            out = new_batch((b, *spec.shape), torch.uint8, ds._buffers, arr)
            self.gather(out.numpy(), arr)
            return out if mask else out.permute(0, 3, 1, 2)
        hw, boxes = self._hw_boxes(ds, field.image if isinstance(field, Mask) else name)
        jpeg = spec.codec == "jpeg"
        crcs = self.values(array_name(f"{name}_crc", size)).astype(np.int64) if jpeg else None
        srcs, places = ds.arrays.samples(arr, self.groups, self.local)
        shape = spec.shape if ds.crop is None else (*ds.crop.size, *spec.shape[2:])
        return ds.pixels(Pixels(srcs, places, jpeg, hw, boxes, crcs), (b, *shape), spec.field, mask)
