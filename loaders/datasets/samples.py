"""SampleDataset (`prep.pack_samples`: a dict of fields a batch), ImageShardDataset, and
AudioDataset: windows of a `prep audio` dataset, slices of the map (nothing decoded)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Unpack

import numpy as np
import torch

from loaders.augment.boxes import Targets, outputs, per_box
from loaders.augment.crops import RandomResizedCrop as ReadCrop
from loaders.augment.crops import whole
from loaders.augment.random import stream_key, uniform
from loaders.datasets.base import Decoding, DecodingDataset, Remote, ShardedDataset
from loaders.fields.audio import Audio
from loaders.fields.base import RAGGED_POLICIES, Field, ragged_batch
from loaders.fields.image import Image, hw_name
from loaders.fields.mask import Mask
from loaders.format import array_name
from loaders.read.decode import Pixels
from loaders.read.loader import Batch, new_batch
from loaders.read.store import by_shard
from loaders.transforms import Compose, RandomResizedCrop

AUDIO = "audio"  # AudioDataset's samples' field (prep.kinds.audio.pack)
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
    `fast_dct`: JPEG through libjpeg-turbo's fast integer IDCT (README: Fast DCT).
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
        if len(groups) == 1:
            arr = arrays.array(groups[0][0], name)
            if dst.dtype == arr.dtype:
                # One shard: one vectorised read into `dst`. mode="clip": the indices are
                # checked, and "raise" buffers the whole output before copying it.
                np.take(arr, local, axis=0, out=dst, mode="clip")
                return
        for s, pos in groups:
            arr = arrays.array(s, name)
            if dst[:1].nbytes > 4096:
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


class AudioDataset(ShardedDataset):
    """Dict batches: `audio`, a window of round(seconds * rate) samples a clip (B, W), (B, C, W)
    without --mono, from a start drawn from (seed, epoch, index) with `random`, else centred,
    zero-padded, and `audio_len`; `seconds=None`: whole clips. `fields`: others (label).

    Examples:
        >>> from loaders import AudioDataset, make_loader
        >>> ds = AudioDataset("data/demo-audio-packed", seconds=1.0, seed=0)
        >>> batch = next(iter(make_loader(ds, batch_size=4)))
        >>> batch["audio"].shape  # --mono, --rate 16000: one second a window
        torch.Size([4, 16000])
    """

    dicts = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        seconds: float | None = 1.0,
        seed: int = 0,
        split: str | None = None,
        *,
        fields: Sequence[str] | None = None,
        random: bool = True,
        **store: Unpack[Remote],
    ):
        super().__init__(root, split=split, **store)
        audio = self.declared.get(AUDIO)
        if not isinstance(audio, Audio):
            raise ValueError(f"{self.store.root} is not an audio dataset (packed by prep audio)")
        self.rate, self.channels, self.mono = audio.rate, audio.channels, audio.mono
        if seconds is not None and round(seconds * self.rate) < 1:
            raise ValueError(f"seconds={seconds} is under one sample at {self.rate} Hz")
        self.window = None if seconds is None else round(seconds * self.rate)
        chosen = (["label"] if "label" in self.declared else []) if fields is None else fields
        self.check_fields([AUDIO, *chosen], [*self.declared, "index"])
        if seed < 0:
            raise ValueError(f"seed {seed} must be non-negative")
        self.fields = (AUDIO, *(f for f in chosen if f != AUDIO))  # the windows always, first
        self.seed, self.random = seed, random

    def lengths(self, indices: Sequence[int]) -> np.ndarray:
        """Each clip's length in samples (frames), for bucketing by duration."""
        pieces = ArrayReading(self, self._checked(indices)).pieces(AUDIO)  # views: nothing read
        return np.array([len(p) // self.channels for p in pieces], np.int64)

    def starts(self, index: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Each window's first sample: drawn uniformly over the clip (random), else centred."""
        room = np.maximum(lengths - (self.window or 0), 0)
        if not self.random:
            return room // 2
        key = stream_key(self.seed, self.epoch, "AudioDataset")
        u = uniform(key, torch.from_numpy(index), 1)[:, 0].numpy()
        return np.minimum((u * (room + 1)).astype(np.int64), room)

    def __getitems__(self, indices: Sequence[int]) -> SampleBatch:
        index = self._checked(indices)
        reading = ArrayReading(self, index)
        out: dict[str, Any] = self._windows(index, reading.pieces(AUDIO))
        for f in self.fields[1:]:
            if f == "index":
                out[f] = self._index(index)
            else:  # as its kind reads it (SampleDataset's: text as str, ragged padded)
                for k, v in self.declared[f].read(reading, f, "pad").items():
                    out[k] = v.to(torch.int64) if torch.is_tensor(v) and v.dtype in WIDE else v
        return SampleBatch(out, len(index))

    def _windows(self, index: np.ndarray, pieces: list[np.ndarray]) -> dict[str, Any]:
        """`audio` (windows, or whole clips padded) and `audio_len` of the clips `pieces`."""
        c = self.channels
        lens = np.array([len(p) // c for p in pieces], np.int64)
        if self.window is None:
            got = ragged_batch(AUDIO, pieces, () if self.mono else (c,), "pad")
            if not self.mono:  # (B, C, T), contiguous as a model's .view() expects
                got[AUDIO] = got[AUDIO].permute(0, 2, 1).contiguous()
            return got
        w = self.window
        first = self.starts(index, lens)
        dtype = self.store.manifest.arrays[AUDIO].dtype
        buf = np.zeros((len(pieces), c, w), dtype)  # (B, C, W): channels first, contiguous
        n = np.minimum(lens - first, w)
        for j, p in enumerate(pieces):
            a = int(first[j]) * c
            buf[j, :, : n[j]] = p[a : a + int(n[j]) * c].reshape(-1, c).T
        audio = torch.from_numpy(buf)
        return {AUDIO: audio[:, 0] if self.mono else audio, f"{AUDIO}_len": torch.from_numpy(n)}

    def _shown(self) -> dict[str, Any]:
        return {"clips": len(self), "rate": self.rate, "window": self.window, "fields": self.fields}


# transforms= and crop=: each field read in its role in a Compose call, as its kind says
# (Field.follows); the boxes left under 1 px go with their keypoints, instances and per-box rows.
MIN_SIZE = 1.0  # px a clipped box keeps each way: SanitizeBoundingBoxes' default, Compose's
ROLES = ("image", "mask", "boxes", "keypoints", "instances", "per_box", "label")


@dataclass(frozen=True)
class Roles:
    """The fields a pipeline is given, by their role in the call."""

    image: str
    mask: str | None = None
    boxes: str | None = None
    keypoints: str | None = None
    instances: str | None = None
    label: str | None = None
    per_box: tuple[str, ...] = ()


def _one(
    read: Mapping[str, Field],
    role: str,
    root: object,
    image: str | None = None,
    by: str = "transforms=",
) -> str | None:
    """The one field read in `role` (of image field `image`, where given), or None."""
    names = _as(read, role, image)
    if len(names) > 1:
        raise ValueError(
            f"{root}: {by} moves one {role} field, and fields= reads {names}. "
            f"HINT: read one of them with fields="
        )
    return names[0] if names else None


def _as(read: Mapping[str, Field], role: str, image: str | None = None) -> list[str]:
    """The fields read that a pipeline moves as `role` (of image field `image`, where given)."""
    of = [f for f, d in read.items() if d.follows() == role]
    return [f for f in of if image is None or getattr(read[f], "image", None) == image]


def roles_of(read: Mapping[str, Field], fields: Sequence[str], root: object) -> Roles:
    """The role of each field `read`; a ValueError with the fix where a pipeline cannot serve."""
    unmoved = [f for f, d in read.items() if d.placed and d.follows() not in ROLES]
    if unmoved:
        raise ValueError(
            f"{root}: transforms= does not move field {unmoved[0]} "
            f"({read[unmoved[0]].kind}). HINT: read it without transforms=, or with crop="
        )
    boxes = _one(read, "boxes", root)
    of = getattr(read[boxes], "image", None) if boxes is not None else None
    image = _one(read, "image", root) if of is None else of if of in read else None
    if image is None:
        raise ValueError(f"{root}: transforms= needs an image field among fields={tuple(fields)}")
    label, mask = _one(read, "label", root), _one(read, "mask", root, image)
    return _instances(read, Roles(image, mask, boxes, label=label), root, "transforms=")


def crop_roles(read: Mapping[str, Field], root: object) -> Roles | None:
    """What a load-time `crop=` drops with a box it cuts away; None when no boxes are read."""
    boxes = _one(read, "boxes", root, by="crop=")
    if boxes is None:
        return None
    image: str = read[boxes].image  # type: ignore[attr-defined]
    return _instances(read, Roles(image, boxes=boxes), root, "crop=")


def _instances(read: Mapping[str, Field], r: Roles, root: object, by: str) -> Roles:
    """Roles `r` with its image's keypoints and instances, and the per-box fields."""
    instances = _one(read, "instances", root, r.image, by)
    if instances is not None and r.boxes is None:
        raise ValueError(f"{root}: instance masks move with their boxes: read 'boxes' too")
    per_box = tuple(_as(read, "per_box")) if r.boxes is not None else ()
    keypoints = _one(read, "keypoints", root, r.image, by)
    return replace(r, keypoints=keypoints, instances=instances, per_box=per_box)


def read_crop(aug: Any) -> tuple[Any, Any] | None:
    """Compose `aug`'s leading (and only) RandomResizedCrop as a load-time crop, and the rest."""
    ops = list(aug.ops)
    crops = [op for op in ops if isinstance(op, RandomResizedCrop)]
    if len(crops) != 1 or ops[0] is not crops[0]:
        return None
    first = crops[0]
    crop = ReadCrop(first.size, first.scale, first.ratio, seed=aug.seed)
    rest = Compose(ops[1:], aug.seed, aug.epoch, aug.min_size, cpu_kernel=aug.cpu_kernel)
    return crop, rest


def transform(
    aug: Any, out: dict[str, Any], r: Roles, index: np.ndarray, epoch: int
) -> dict[str, Any]:
    """The batch `out` with the fields of roles `r` through Compose `aug` at `epoch`."""
    if aug.epoch != epoch:  # the dataset's set_epoch reaches the workers' copies so
        aug.set_epoch(epoch)
    kw, padded = _given(out, r)
    kw["index"] = torch.from_numpy(np.asarray(index, dtype=np.int64))
    if r.mask is not None:
        kw["mask"] = out[r.mask]
    args = (out[r.image],) if r.label is None else (out[r.image], out[r.label])
    got = aug(*args, **kw)
    got = list(got) if isinstance(got, tuple) else [got]
    new = dict(out) | {f: got.pop(0) for f in (r.image, r.label, r.mask) if f is not None}
    return _returned(new, got, r, padded)


def drop_cut_boxes(
    out: dict[str, Any], r: Roles, batch: int, hw: tuple[int, int]
) -> dict[str, Any]:
    """The batch `out` without the boxes a load-time crop to `hw` cut, as a pipeline's end."""
    if batch == 0:  # nothing to drop (and a list of no keypoints has no row shape)
        return out
    kw, padded = _given(out, r)
    lengths = kw.get("lengths")
    t = Targets.of(batch, kw["boxes"], kw.get("keypoints"), lengths)
    stack: torch.Tensor | None = None
    if r.instances is not None:  # (B, H, W, N), as a pipeline moves them
        stack = per_box(kw["instances"], lengths, t, r.instances).permute(0, 2, 3, 1)
    return _returned(dict(out), outputs(t, hw, MIN_SIZE, kw, lengths, stack), r, padded)


def _given(out: dict[str, Any], r: Roles) -> tuple[dict[str, Any], list[str]]:
    """The batch's boxes, keypoints... as a pipeline takes them, and those read padded."""
    ragged = [f for f in (r.boxes, r.keypoints, r.instances, *r.per_box) if f is not None]
    padded = [f for f in ragged if f"{f}_len" in out]
    named = {"boxes": r.boxes, "keypoints": r.keypoints, "instances": r.instances}
    kw: dict[str, Any] = {k: out[f] for k, f in named.items() if f is not None}
    if padded:
        kw["lengths"] = out[f"{padded[0]}_len"]
    if r.per_box:
        kw["per_box"] = {f: out[f] for f in r.per_box}
    return kw, padded


def _returned(new: dict[str, Any], got: list[Any], r: Roles, padded: list[str]) -> dict[str, Any]:
    """`new` with what a pipeline returned of the instances (`got`, in outputs' order)."""
    new |= {f: got.pop(0) for f in (r.boxes, r.keypoints, r.instances) if f is not None}
    if padded:
        lengths = got.pop(0)
        new |= {f"{f}_len": lengths for f in padded}
    if r.per_box:
        new |= got.pop(0)
    return new
