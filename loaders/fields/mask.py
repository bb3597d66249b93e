"""The mask field: class ids (H, W) uint8 placed on an image field (nearest neighbour)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import loaders.fields.drawing as drawing
from loaders.fields.base import Piece, Reading, spec
from loaders.fields.image import Placed, hw_name, keep_problems
from loaders.format.spec import ArraySpec


@dataclass(frozen=True)
class Mask(Placed):
    pad_value: int = 0
    kind = "mask"

    def arrays(self, name: str) -> list[ArraySpec]:
        codec = "ragged" if self.mode == "keep" else "raw"
        return [spec(name, "mask", "uint8", (s, s), codec, s) for s in self.sizes]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return {name: batch.images(self, name)}

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        return keep_problems(name, self.image, self.sizes, 1, arrays)

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        data = piece(self.at(name, size))
        if self.mode != "keep":
            return data
        return data.reshape(*(int(v) for v in piece(hw_name(self.image, size or self.sizes[0]))))

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        return [drawing.blend(p, value) for p in pictures]
