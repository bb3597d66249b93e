"""Instance masks: an (H, W) mask of 0 and 1 an instance, placed on an image field (nearest).

>>> crop_masks(np.arange(16, dtype=np.uint8).reshape(1, 4, 4), np.array([0, 2, 4, 2]), (2, 1))
array([[[ 7],
        [15]]], dtype=uint8)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import loaders.fields.drawing as drawing
from loaders.fields.base import Piece, Reading, ragged_batch, spec, tensor
from loaders.fields.image import Placed, hw_name
from loaders.format.spec import ArraySpec, FormatError, array_name


@dataclass(frozen=True)
class Instances(Placed):
    """Masks (N, H, W) uint8 at the image's stored size; mode keep without `crop=`: a list."""

    kind = "instances"
    ragged = True

    def arrays(self, name: str) -> list[ArraySpec]:
        return [spec(name, "instances", "uint8", (s, s), "ragged", s) for s in self.sizes]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        size = batch.size or 0
        pieces = batch.pieces(array_name(name, size))
        if self.mode == "keep":
            hws = batch.values(hw_name(self.image, size)).astype(np.int64)
        else:
            hws = np.full((len(pieces), 2), size, dtype=np.int64)
        stacks = []
        for j, (p, (h, w)) in enumerate(zip(pieces, hws.tolist(), strict=True)):
            if h * w < 1 or len(p) % (h * w):  # checked at open: a file changed since
                raise FormatError(
                    f"{batch.where(array_name(name, size))[j]}: field {name} is not whole "
                    f"{h} x {w} masks. HINT: run `prep verify`, then repack"
                )
            stacks.append(p.reshape(-1, h, w))
        crops = batch.crops(self.image)
        if crops is not None:
            boxes, row = crops
            stacks = [crop_masks(m, box, row) for m, box in zip(stacks, boxes, strict=True)]
        elif self.mode == "keep":
            return {name: [tensor(np.array(m)) for m in stacks]}
        else:
            row = (size, size)
        return ragged_batch(name, [m.reshape(-1) for m in stacks], tuple(row), policy)

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        """Each sample whole masks of its image's stored (h, w) (mode keep: its hw)."""
        for s in self.sizes:
            off = arrays.get(array_name(name, s) + ".offsets")
            hw = hw_name(self.image, s)
            if off is None or (self.mode == "keep" and hw not in arrays):
                continue
            sides = arrays[hw].astype(np.int64) if self.mode == "keep" else np.array([[s, s]])
            area = sides[:, 0] * sides[:, 1]
            if np.any(area < 1) or np.any(np.diff(off) % np.maximum(area, 1)):
                return [f"a sample of {name} at {s} is not whole masks of its image's size"]
        return []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        size = size or self.sizes[0]
        keep = self.mode == "keep"
        h, w = (int(v) for v in piece(hw_name(self.image, size))) if keep else (size, size)
        return piece(array_name(name, size)).reshape(-1, h, w)

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        """Instance k's pixels blended in drawing.PALETTE[k] (a later instance over an earlier)."""
        masks = np.asarray(value)
        ids = (masks > 0) * np.arange(1, len(masks) + 1)[:, None, None]
        flat = ids.max(axis=0) if len(masks) else np.zeros(masks.shape[1:], np.int64)
        return [drawing.blend(p, flat) for p in pictures]

    def caption(self, value: Any) -> str:
        return f"({len(value)} instances)"


def crop_masks(masks: np.ndarray, crop: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """Masks (N, h, w) cut to crop (top, left, height, width), resized to `out_hw` (nearest)."""
    top, left, h, w = (int(v) for v in crop)
    cut = masks[:, top : top + h, left : left + w].transpose(1, 2, 0)
    return np.ascontiguousarray(drawing.nearest(cut, out_hw).transpose(2, 0, 1))
