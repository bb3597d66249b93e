"""The polygons field: outlines (COCO's segmentation polygons) placed on an image field; arrays:
docs/format.md, "Field kinds". A load-time `crop=` clips each polygon, dropping one left without
area. Read as a list (a sample) of lists of float32 (k, 2) tensors.

>>> clip(np.array([[-5, 0], [5, 0], [5, 10], [-5, 10]], np.float64), 8, 8).tolist()
[[0.0, 0.0], [5.0, 0.0], [5.0, 8.0], [0.0, 8.0]]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import loaders.fields.drawing as drawing
from loaders.fields.base import Piece, Reading, spec, tensor
from loaders.fields.image import Placed
from loaders.format.spec import ArraySpec, array_name


@dataclass(frozen=True)
class Polygons(Placed):
    kind = "polygons"
    ragged = True
    layer = 1

    def arrays(self, name: str) -> list[ArraySpec]:
        points = [spec(name, "points", "float32", (2,), "ragged", s) for s in self.sizes]
        return [*points, spec(f"{name}_lens", "lens", "int32", (), "ragged")]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        points = batch.pieces(array_name(name, batch.size or 0))
        lens = batch.pieces(f"{name}_lens")
        crops = batch.crops(self.image)
        out = []
        for j, (p, n) in enumerate(zip(points, lens, strict=True)):
            polys = split(p, n)
            if crops is not None:
                polys = cropped(polys, crops[0][j], crops[1])
            out.append([tensor(q.astype(np.float32)) for q in polys])
        return {name: out}

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        """Polygons of 3 points or more, adding up to each sample's points, inside the image."""
        lens, lens_off = arrays[f"{name}_lens"], arrays[f"{name}_lens.offsets"]
        if len(lens) and lens.min() < 3:
            return [f"a polygon of {name} has fewer than 3 points"]
        ends = np.concatenate([[0], np.cumsum(lens, dtype=np.int64)])
        per_sample = ends[lens_off[1:]] - ends[lens_off[:-1]]
        for s in self.sizes:
            off = arrays[array_name(name, s) + ".offsets"]
            if not np.array_equal(np.diff(off), 2 * per_sample):
                return [f"the points of {name} at {s} are not its polygons' counts"]
            pts = arrays[array_name(name, s)]
            if len(pts) and not ((pts >= 0).all() and (pts <= s).all()):  # nan fails both
                return [f"a point of {name} at {s} is not within 0..{s} px"]
        return []

    def value(self, name: str, piece: Piece, size: int | None) -> list[np.ndarray]:
        return split(piece(self.at(name, size)), piece(f"{name}_lens"))

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        outlines = [along(np.asarray(poly, np.float64) * scale) for poly in value]
        return drawing.marked(pictures, outlines, lambda p, xy, c: drawing.dots(p, xy, c, 2))

    def caption(self, value: Any) -> str:
        return f"({len(value)} polygons)"


def split(points: np.ndarray, lens: np.ndarray) -> list[np.ndarray]:
    """A sample's flat points cut into its polygons, (k, 2) each."""
    xy = np.asarray(points).reshape(-1, 2)
    ends = np.cumsum(np.asarray(lens, np.int64))
    return [xy[a:b] for a, b in zip([0, *ends[:-1].tolist()], ends.tolist(), strict=True)]


def along(poly: np.ndarray) -> np.ndarray:
    """Points every pixel along a polygon's closed outline, for drawing.dots."""
    nxt = np.roll(poly, -1, axis=0)
    steps = [max(2, int(np.abs(q - p).max()) + 1) for p, q in zip(poly, nxt, strict=True)]
    return np.concatenate(
        [np.linspace(p, q, n) for p, q, n in zip(poly, nxt, steps, strict=True)] or [poly]
    )


def clip(poly: np.ndarray, h: float, w: float) -> np.ndarray:
    """Polygon (k, 2) clipped to [0, w] x [0, h] (Sutherland-Hodgman): (m, 2), m 0 for none."""
    out = np.asarray(poly, np.float64)
    for axis, bound, keep_low in ((0, 0.0, False), (0, w, True), (1, 0.0, False), (1, h, True)):
        if not len(out):
            break
        inside = out[:, axis] <= bound if keep_low else out[:, axis] >= bound
        nxt = np.roll(out, -1, axis=0)
        nxt_in = np.roll(inside, -1)
        pieces = []
        for p, q, p_in, q_in in zip(out, nxt, inside, nxt_in, strict=True):
            if p_in:
                pieces.append(p)
            if p_in != q_in:  # the edge crosses the bound: where
                t = (bound - p[axis]) / (q[axis] - p[axis])
                pieces.append(p + t * (q - p))
        out = np.array(pieces, np.float64).reshape(-1, 2)
    return out


def area(poly: np.ndarray) -> float:
    """The shoelace area of a (k, 2) polygon."""
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def cropped(polys: list[np.ndarray], crop: np.ndarray, out_hw: tuple[int, int]) -> list[np.ndarray]:
    """Polygons moved as crop_boxes moves boxes, clipped; those left without area dropped."""
    top, left, h, w = (float(v) for v in crop)
    scale = np.array([out_hw[1] / w, out_hw[0] / h])
    moved = [clip((p - [left, top]) * scale, *out_hw) for p in polys]
    return [p for p in moved if len(p) >= 3 and area(p) > 0]
