"""The boxes field: (x0, y0, x1, y1) in px of an image field as stored, placed on it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import loaders.fields.drawing as drawing
from loaders.fields.base import Piece, Reading, ragged_batch, spec
from loaders.fields.image import Placed
from loaders.format.spec import ArraySpec, array_name


@dataclass(frozen=True)
class Boxes(Placed):
    """Boxes (N, 4) float32; `crop=` moves and clips them (loaders.datasets.samples drops some)."""

    kind = "boxes"
    ragged = True
    layer = 1

    def arrays(self, name: str) -> list[ArraySpec]:
        return [spec(name, "boxes", "float32", (4,), "ragged", s) for s in self.sizes]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return ragged_batch(name, self.cropped(batch, name, crop_boxes), (4,), policy)

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        for s in self.sizes:
            values, off = arrays[array_name(name, s)], arrays.get(array_name(name, s) + ".offsets")
            if off is not None and np.any(np.diff(off) % 4):
                return [f"a sample of {name} at {s} is not whole boxes of 4 numbers"]
            b = values.reshape(-1, 4)
            inside = (b >= 0).all() and (b <= s).all()  # nan fails both
            if not inside or (b[:, 2:] < b[:, :2]).any():
                return [f"a box of {name} at {s} is not x0 <= x1, y0 <= y1 within 0..{s} px"]
        return []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        return piece(self.at(name, size)).reshape(-1, 4)

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        return drawing.marked(pictures, np.asarray(value, np.float64) * scale, drawing.outline)

    def caption(self, value: Any) -> str:
        return f"({len(value)} boxes)"


def crop_boxes(flat: np.ndarray, crop: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """Boxes (flat) moved into crop (top, left, height, width) resized to `out_hw`, clipped.

    >>> crop_boxes(np.array([10, 20, 50, 60], np.float32), np.array([0, 10, 100, 100]), (50, 50))
    array([ 0., 10., 20., 30.], dtype=float32)
    """
    top, left, h, w = (float(v) for v in crop)
    # float64, then float32: the very math of a pipeline's crop (Targets.moved), so that crop=
    # and transforms= keep and drop the same boxes (a copy: the map is read-only)
    b = flat.reshape(-1, 4).astype(np.float64)
    b[:, 0::2] = np.clip((b[:, 0::2] - left) * (out_hw[1] / w), 0, out_hw[1])
    b[:, 1::2] = np.clip((b[:, 1::2] - top) * (out_hw[0] / h), 0, out_hw[0])
    return b.astype(np.float32).reshape(-1)
