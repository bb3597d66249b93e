"""The keypoints field: (x, y, visibility) of each joint of each instance, placed on an image."""

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
class Keypoints(Placed):
    """Keypoints (N, `joints`, 3) float32; (0, 0, 0) for a point not labelled or cut by `crop=`."""

    joints: int = 1
    kind = "keypoints"
    ragged = True
    layer = 1

    def arrays(self, name: str) -> list[ArraySpec]:
        row = (self.joints, 3)
        return [spec(name, "keypoints", "float32", row, "ragged", s) for s in self.sizes]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return ragged_batch(name, self.cropped(batch, name, crop_points), (self.joints, 3), policy)

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        for s in self.sizes:
            off = arrays.get(array_name(name, s) + ".offsets")
            if off is not None and np.any(np.diff(off) % (3 * self.joints)):  # x, y, v a joint
                return [f"a sample of {name} at {s} is not whole instances of {self.joints} points"]
        return []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        return piece(self.at(name, size)).reshape(-1, self.joints, 3)

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        shown = [pts[pts[:, 2] > 0, :2] * scale for pts in np.asarray(value, np.float64)]
        return drawing.marked(pictures, shown, drawing.dots)  # the labelled points (visible > 0)


def crop_points(flat: np.ndarray, crop: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """Keypoints (flat x, y, v) moved as crop_boxes moves boxes; one outside becomes (0, 0, 0).

    >>> crop_points(np.array([10, 20, 2, 5, 5, 1], np.float32), np.array([10, 0, 50, 50]), (25, 25))
    array([5., 5., 2., 0., 0., 0.], dtype=float32)
    """
    top, left, h, w = (float(v) for v in crop)
    p = flat.reshape(-1, 3).astype(np.float64)  # a pipeline's math, as crop_boxes
    p[:, 0] = (p[:, 0] - left) * (out_hw[1] / w)
    p[:, 1] = (p[:, 1] - top) * (out_hw[0] / h)
    gone = (p[:, 2] <= 0) | (p[:, 0] < 0) | (p[:, 1] < 0)
    p[gone | (p[:, 0] > out_hw[1]) | (p[:, 1] > out_hw[0])] = 0
    return p.astype(np.float32).reshape(-1)
