"""Volume datasets (`prep volumes`): whole volumes, and patches sliced out of the map."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Unpack

import numpy as np
import torch

from loaders.datasets.base import Remote, ShardedDataset
from loaders.fields.column import Column
from loaders.fields.volume import Volume, VolumeLabel
from loaders.format import OFFSETS
from loaders.read.buffers import new_batch
from loaders.read.loader import Batch

VOLUMES = ("image", "label")  # the voxels (a Volume field) and their class ids (VolumeLabel)


class VolumeDataset(ShardedDataset):
    """Whole volumes: item v is a tuple in `fields` order (default: "image", "label") of
    (1, D, H, W) tensors; "target" the volume's --targets (float32 or int64), "index" v.
    `meta(v)`: the volume's geometry, stored and as in its source scan.

    Examples:
        >>> from loaders import VolumeDataset
        >>> image, label = VolumeDataset("data/demo-volumes")[0]
        >>> image.dim(), image.shape == label.shape
        (4, True)
    """

    itemized = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        fields: Sequence[str] | None = None,
        **store: Unpack[Remote],
    ):
        super().__init__(root, **store)
        found = self.declared
        if not isinstance(found.get("image"), Volume):
            raise ValueError(f"{self.store.root} has no volumes (packed by prep volumes)")
        have = [f for f in VOLUMES if isinstance(found.get(f), Volume | VolumeLabel)]
        self.fields = tuple(have if fields is None else fields)
        # In the order of their columns: volume_target_2 before volume_target_10
        self._targets = [n for n, f in found.items() if isinstance(f, Column)]
        self._targets.sort(key=lambda n: int(n.rsplit("_", 1)[1]) if n[-1].isdigit() else -1)
        self.check_fields(self.fields, [*have, *(["target"] if self._targets else []), "index"])

    def meta(self, index: int) -> dict[str, Any]:
        v = int(self._checked([index])[0])
        return dict(self.store.manifest.extra["volumes"][v])

    def _where(self, v: int) -> tuple[int, int]:  # volume v's shard, and its index there
        shard, local = self._find(np.array([v]))
        return int(shard[0]), int(local[0])

    def shape(self, v: int) -> tuple[int, int, int]:
        shard, local = self._where(v)
        d, h, w = self.arrays.array(shard, "image_shape")[local].tolist()
        return d, h, w

    def target(self, v: int) -> torch.Tensor:
        """Volume v's targets: a 0-d tensor for one column, else one value per column."""
        shard, local = self._where(v)
        values = [self.arrays.array(shard, name)[local].item() for name in self._targets]
        out = torch.tensor(values, dtype=self._target_dtype(self._targets))
        return out[0] if len(values) == 1 else out

    def volume(self, v: int, field: str = "image") -> np.ndarray:
        """Volume v of `field` as a read-only view of the memory map (no voxel read yet)."""
        shard, local = self._where(v)
        start, stop = self.arrays.array(shard, field + OFFSETS)[local : local + 2].tolist()
        flat = self.arrays.array(shard, field)[start:stop]
        return flat.reshape(self.arrays.array(shard, "image_shape")[local].tolist())

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        v = int(self._checked([index])[0])
        return tuple(self._item(v, f) for f in self.fields)

    def batch_problem(self, batch_size: int) -> str | None:
        """Why batches of whole volumes (not patches) cannot be stacked, or None."""
        if not self.itemized or batch_size <= 1 or set(self.fields) <= {"index", "target"}:
            return None
        n = len(self.store.manifest.shards)
        every = np.concatenate([self.arrays.array(s, "image_shape") for s in range(n)])
        shapes = {tuple(row) for row in every.tolist()}
        if len(shapes) <= 1:
            return None
        shown = ", ".join("x".join(map(str, s)) for s in sorted(shapes)[:3])
        more = f" and {len(shapes) - 3} more" if len(shapes) > 3 else ""
        return (
            f"{self.store.root}: the volumes differ in shape ({shown}{more}), so batches of "
            f"{batch_size} cannot be stacked. HINT: pack one shape (prep volumes --shape D,H,W), "
            "read fixed-size patches (PatchDataset), or load with batch_size=1"
        )

    def _item(self, v: int, field: str) -> torch.Tensor:
        """Volume v's tensor of `field`: its index, its targets, or a copy of its voxels."""
        if field == "index":
            return torch.tensor(v, dtype=torch.int64)
        if field == "target":
            return self.target(v)
        return torch.from_numpy(np.array(self.volume(v, field))[None])

    def _shown(self) -> dict[str, Any]:
        return {"volumes": len(self)}


class PatchDataset(VolumeDataset):
    """Item i: a patch of volume i // per_volume, centred on a voxel drawn from (seed, epoch, i):
    with probability `foreground` a labelled one of a class drawn uniformly, else any.

    Examples:
        >>> from loaders import PatchDataset
        >>> ds = PatchDataset("data/demo-volumes", patch=(32, 32, 32), per_volume=2, seed=0)
        >>> image, label = ds[0]
        >>> image.shape
        torch.Size([1, 32, 32, 32])
    """

    itemized = False  # patches share one shape

    def __init__(
        self,
        root: str | os.PathLike[str],
        patch: Sequence[int],
        per_volume: int = 1,
        foreground: float = 0.33,
        seed: int = 0,
        fields: Sequence[str] | None = None,
        **store: Unpack[Remote],
    ):
        super().__init__(root, fields, **store)
        self.patch = tuple(int(p) for p in patch)
        if len(self.patch) != 3 or min(self.patch) < 1 or per_volume < 1:
            raise ValueError(f"patch {patch} must be 3 positive sizes, per_volume at least 1")
        if not 0 <= foreground <= 1:
            raise ValueError(f"foreground {foreground} must be a fraction 0..1")
        self.per_volume, self.foreground, self.seed = per_volume, foreground, seed
        self._labelled = "label_fg_offsets" in self.store.manifest.arrays

    def __len__(self) -> int:
        return super().__len__() * self.per_volume

    @property
    def shard_sizes(self) -> list[int]:
        return [n * self.per_volume for n in super().shard_sizes]

    def start(self, index: int) -> np.ndarray:
        """The patch's first voxel in its volume (negative along axes shorter than the patch)."""
        v = index // self.per_volume
        shape, patch = np.asarray(self.shape(v)), np.asarray(self.patch)
        rng = np.random.default_rng([self.seed, self.epoch, index])
        centre = self._foreground_voxel(v, shape, rng) if rng.random() < self.foreground else None
        if centre is None:
            start = np.asarray([rng.integers(0, max(n, 0) + 1) for n in shape - patch])
        else:
            start = np.clip(centre - patch // 2, 0, np.maximum(shape - patch, 0))
        return np.where(shape < patch, (shape - patch) // 2, start)

    def _foreground_voxel(
        self, v: int, shape: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray | None:
        """A labelled voxel of volume v (None: none): a class uniformly, then one of its voxels."""
        if not self._labelled:
            return None
        shard, local = self._where(v)
        bounds = self.arrays.array(shard, "label_fg_offsets")[local]
        classes = np.flatnonzero(np.diff(bounds))
        if not classes.size:
            return None
        c = int(rng.choice(classes))
        flat = self.arrays.array(shard, "label_fg")[rng.integers(bounds[c], bounds[c + 1])]
        return np.asarray(np.unravel_index(int(flat), tuple(shape.tolist())))

    def read(self, index: int, field: str, out: np.ndarray, start: np.ndarray) -> None:
        """Fill `out` with item `index`'s patch of `field`, from `start` (`self.start`'s)."""
        v = index // self.per_volume
        vol = self.volume(v, field)
        src, dst = [], []
        for s, p, n in zip(start.tolist(), self.patch, vol.shape, strict=True):
            lo, hi = max(s, 0), min(s + p, n)
            src.append(slice(lo, hi))
            dst.append(slice(lo - s, hi - s))
        if any(d.stop - d.start < p for d, p in zip(dst, self.patch, strict=True)):
            pad = self.store.manifest.extra["volumes"][v]["pad"] if field == "image" else 0
            out.fill(pad)
        out[tuple(dst)] = vol[tuple(src)]

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        checked = self._checked(indices)
        idx = checked.tolist()
        starts = [self.start(i) for i in idx]
        tensors = []
        for field in self.fields:
            if field == "index":  # the patch's own index: its crop depends on it, not v
                tensors.append(self._index(checked))
            elif field == "target":  # each patch carries its volume's targets
                tensors.append(torch.stack([self.target(i // self.per_volume) for i in idx]))
            else:
                dtype = self.store.manifest.arrays[field].dtype
                batch = new_batch((len(idx), 1, *self.patch), getattr(torch, dtype))
                view = batch.numpy()
                for row, i in enumerate(idx):
                    self.read(i, field, view[row, 0], starts[row])
                tensors.append(batch)
        return Batch(tuple(tensors))

    __getitem__ = ShardedDataset.__getitem__  # a patch is a batch of one, not a whole volume

    def _shown(self) -> dict[str, Any]:
        said = dict(patch=self.patch, per_volume=self.per_volume, foreground=self.foreground)
        return said | dict(seed=self.seed, volumes=super().__len__(), patches=len(self))
