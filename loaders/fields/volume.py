"""Volume fields (`prep volumes`): a 3-D scan a sample, and its label voxels.

`Volume` NAME stores NAME (the voxels of each volume back to back, C order, ragged: sample v is
its voxels, flat) and NAME_shape (uint32 (3,): its (D, H, W)); axis k increases toward letter k
of `orient`. Its per-volume geometry (spacing, origin, direction, affine, pad value) is the
manifest's `extra.volumes`, a list of one object a volume. `VolumeLabel` NAME of volume VOL
stores NAME (uint8 class ids, the same shapes) and, with `foreground`, an index of the labelled
voxels for PatchDataset's sampling: NAME_fg (flat uint32 voxel indices, each volume's by class)
and NAME_fg_offsets (int64 (256,) a volume: where each class 1..255 ends in NAME_fg).

SampleDataset reads volumes as a list of (1, D, H, W) tensors a batch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, Reading, spec
from loaders.format.spec import ArraySpec, FormatError

ORIENT = "RASLPI"


@dataclass(frozen=True)
class Volume(Field):
    """Volumes of `dtype` (int16 HU, uint8 windowed, float16), oriented `orient`."""

    dtype: str = "int16"
    orient: str = "RAS"
    kind = "volume"
    ragged = True

    def __post_init__(self) -> None:
        if self.dtype not in ("int16", "uint8", "float16"):
            raise ValueError(f"dtype {self.dtype!r} is not int16, uint8 or float16")
        if not (
            isinstance(self.orient, str)
            and len(self.orient) == 3
            and set(self.orient) <= set(ORIENT)
        ):
            raise ValueError(f"orient {self.orient!r:.20} is not three of {ORIENT}")

    def arrays(self, name: str) -> list[ArraySpec]:
        return [
            spec(name, "voxels", self.dtype, (), "ragged"),
            spec(f"{name}_shape", "shape", "uint32", (3,)),
        ]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        import torch

        shapes = batch.values(f"{name}_shape").tolist()
        pieces = batch.pieces(name)
        return {
            name: [
                torch.from_numpy(np.array(p).reshape(1, *s))
                for p, s in zip(pieces, shapes, strict=True)
            ]
        }

    def check_extra(self, name: str, extra: Mapping[str, Any], count: int) -> None:
        meta = extra.get("volumes")
        if not isinstance(meta, list) or len(meta) != count:
            raise FormatError(f"extra.volumes is not a list of {count} volumes' metadata")
        if not all(isinstance(v, dict) and isinstance(v.get("pad"), int | float) for v in meta):
            raise FormatError("extra.volumes: a volume's metadata has no pad value")

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        """Each volume's voxels are its shape's product (Python ints: three uint32 sides
        overflow int64, and a size wrapped negative once let a read return another volume's
        voxels)."""
        sizes = [math.prod(s) for s in arrays[f"{name}_shape"].tolist()]
        off = arrays[name + ".offsets"].tolist()
        if [b - a for a, b in itertools.pairwise(off)] != sizes:
            return [f"the offsets of {name} do not step by the volumes' sizes"]
        return []

    def lines(self, name: str, m: Any) -> list[str]:
        return [f"{name}: volumes of {self.dtype}, axes toward {self.orient}"]


@dataclass(frozen=True)
class VolumeLabel(Field):
    """Class ids (uint8) of volume field `volume`, voxel for voxel; `foreground`: with the index
    of its labelled voxels, by class."""

    volume: str = "image"
    foreground: bool = True
    kind = "volume_label"
    ragged = True

    def arrays(self, name: str) -> list[ArraySpec]:
        out = [spec(name, "voxels", "uint8", (), "ragged")]
        if self.foreground:
            out += [spec(f"{name}_fg", "fg", "uint32", (), "flat")]
            out += [spec(f"{name}_fg_offsets", "fg_offsets", "int64", (256,))]
        return out

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        import torch

        shapes = batch.values(f"{self.volume}_shape").tolist()
        pieces = batch.pieces(name)
        return {
            name: [
                torch.from_numpy(np.array(p).reshape(1, *s))
                for p, s in zip(pieces, shapes, strict=True)
            ]
        }

    def needs(self, name: str) -> list[str]:
        return [f"{self.volume}_shape"]

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        """The labels lie on their volume's voxels (where its offsets were read too); the
        foreground index bounds each volume's classes in order and holds voxels of its volume
        only."""
        theirs = self.volume + ".offsets"
        if theirs in arrays and not np.array_equal(arrays[name + ".offsets"], arrays[theirs]):
            return [f"the offsets of {name} are not its volume {self.volume}'s"]
        if not self.foreground:
            return []
        bounds, fg = arrays[f"{name}_fg_offsets"], arrays[f"{name}_fg"]
        if not len(bounds):
            return [] if not len(fg) else [f"{name}_fg holds voxels of no volume"]
        ok = bool(np.all(bounds[:, 1:] >= bounds[:, :-1])) and bounds[0, 0] == 0
        ok = ok and bounds[-1, -1] == len(fg) and bool(np.all(bounds[1:, 0] == bounds[:-1, -1]))
        if not ok:
            return [f"{name}_fg_offsets do not bound each volume's classes in {name}_fg"]
        sizes = [math.prod(s) for s in arrays[f"{self.volume}_shape"].tolist()]
        for (a, b), size in zip(bounds[:, [0, -1]].tolist(), sizes, strict=True):
            if b > a and int(fg[a:b].max()) >= size:
                return [f"{name}_fg holds a voxel outside its volume"]
        return []


def volumes(pieces: list[np.ndarray], shapes: np.ndarray) -> list[Any]:
    """Each volume's flat voxels as a (1, D, H, W) tensor (a copy: the maps are read-only)."""
    import torch

    return [
        torch.from_numpy(np.array(p).reshape(1, *s))
        for p, s in zip(pieces, shapes.tolist(), strict=True)
    ]
