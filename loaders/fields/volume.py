"""Volume fields (`prep volumes`): `Volume`, a 3-D scan a sample, and `VolumeLabel`, its label
voxels and foreground index (docs/format.md, "Volumes"); read as lists of (1, D, H, W) tensors."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import loaders.fields.drawing as drawing
from loaders.fields.base import Field, Piece, Reading, spec, tensor
from loaders.format.spec import ArraySpec, FormatError

ORIENT = "RASLPI"
SLICE_MIN = 128  # px: a middle slice is enlarged (whole voxels) to at least this side
LISTED = 10  # `prep info` lists up to this many volumes, one line each; past it, a summary


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
        orient = self.orient if isinstance(self.orient, str) else ""
        if len(orient) != 3 or not set(orient) <= set(ORIENT):
            raise ValueError(f"orient {self.orient!r:.20} is not three of {ORIENT}")

    def arrays(self, name: str) -> list[ArraySpec]:
        return [
            spec(name, "voxels", self.dtype, (), "ragged"),
            spec(f"{name}_shape", "shape", "uint32", (3,)),
        ]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return {name: volumes(batch.pieces(name), batch.values(f"{name}_shape"))}

    def check_extra(self, name: str, extra: Mapping[str, Any], count: int) -> None:
        meta = extra.get("volumes")
        if not isinstance(meta, list) or len(meta) != count:
            raise FormatError(f"extra.volumes is not a list of {count} volumes' metadata")
        if not all(isinstance(v, dict) and isinstance(v.get("pad"), int | float) for v in meta):
            raise FormatError("extra.volumes: a volume's metadata has no pad value")

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        # Python ints: a size wrapped negative in int64 once let a read return another volume
        sizes = [math.prod(s) for s in arrays[f"{name}_shape"].tolist()]
        off = arrays[name + ".offsets"].tolist()
        if [b - a for a, b in itertools.pairwise(off)] != sizes:
            return [f"the offsets of {name} do not step by the volumes' sizes"]
        return []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        return piece(name).reshape(*(int(n) for n in piece(f"{name}_shape")))

    def pictures(self, value: Any) -> list[tuple[np.ndarray, str]]:
        """The middle slice across each axis, grey (not uint8: 0.5th to 99.5th percentile)."""
        planes = middle_slices(value)
        if value.dtype != np.uint8:
            lo, hi = np.percentile(np.concatenate([p.ravel() for p in planes]), [0.5, 99.5])
            k = 255 / max(float(hi - lo), 1e-6)
            planes = [np.rint(np.clip((p - lo) * k, 0, 255)).astype(np.uint8) for p in planes]
        grey = [np.repeat(p[..., None], 3, axis=2) for p in planes]
        return list(zip(grey, self.orient, strict=True))

    def caption(self, value: Any) -> str:
        return "x".join(str(n) for n in np.shape(value))

    def lines(self, name: str, m: Any) -> list[str]:
        """Its dtype and orient, then each volume's shape and spacing (past LISTED: a summary)."""
        lines = [
            f"{name}: volumes of {self.dtype}, axis k increases toward letter k of {self.orient}"
        ]
        meta = [v for v in m.extra.get("volumes", []) if isinstance(v, dict)]
        if not meta:
            return lines
        shape = ["x".join(str(int(n)) for n in v.get("shape", [])) for v in meta]
        spacing = ["x".join(f"{float(s):g}" for s in v.get("spacing", [])) for v in meta]
        if len(meta) <= LISTED:
            path = [str(v.get("path", ""))[:40] for v in meta]
            width = max(len(p) for p in path)
            return lines + [
                f"{i:>4} {p:<{width}}  {s:<14}  spacing {mm} mm"
                for i, (p, s, mm) in enumerate(zip(path, shape, spacing, strict=True))
            ]
        common = ", ".join(f"{s} ({n})" for s, n in Counter(shape).most_common(3))
        shapes = _ranges([v.get("shape") for v in meta])
        return [
            *lines,
            f"shapes (D x H x W): {shapes}; {len(set(shape))} distinct, commonest {common}",
            f"spacing (mm): {_ranges([v.get('spacing') for v in meta])}",
        ]


def _ranges(rows: list[Any]) -> str:
    """Per axis min..max (one number where they agree), axes joined by x; "?" for odd rows.

    >>> _ranges([[3, 4, 5], [4, 4, 5]])
    '3..4x4x5'
    """
    try:
        a = np.array(rows, dtype=np.float64).reshape(len(rows), -1)
    except (TypeError, ValueError):
        return "?"
    spans = zip(a.min(0).tolist(), a.max(0).tolist(), strict=True)
    return "x".join(f"{lo:g}" if lo == hi else f"{lo:g}..{hi:g}" for lo, hi in spans)


@dataclass(frozen=True)
class VolumeLabel(Field):
    """Class ids (uint8) of volume field `volume`, voxel for voxel."""

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
        return {name: volumes(batch.pieces(name), batch.values(f"{self.volume}_shape"))}

    def needs(self, name: str) -> list[str]:
        return [f"{self.volume}_shape"]

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        return piece(name).reshape(*(int(n) for n in piece(f"{self.volume}_shape")))

    def drawn_on(self) -> str | None:
        return self.volume

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        return [drawing.blend(p, s) for p, s in zip(pictures, middle_slices(value), strict=True)]

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        """On their volume's voxels; the foreground index bounds each volume's classes, in it."""
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


def middle_slices(vol: np.ndarray) -> list[np.ndarray]:
    """The middle plane across each axis (first axis rightward), enlarged to SLICE_MIN px."""
    planes = [np.take(vol, vol.shape[a] // 2, axis=a).T[::-1] for a in range(3)]
    k = max(1, -(-SLICE_MIN // max(1, *(max(p.shape) for p in planes))))
    return [drawing.nearest(p, (p.shape[0] * k, p.shape[1] * k)) for p in planes]


def volumes(pieces: list[np.ndarray], shapes: np.ndarray) -> list[Any]:
    """Each volume's flat voxels as a (1, D, H, W) tensor (a copy: the maps are read-only)."""
    return [
        tensor(np.array(p).reshape(1, *s)) for p, s in zip(pieces, shapes.tolist(), strict=True)
    ]
