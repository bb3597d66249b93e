"""The mask field: class ids (H, W) of an image field, resized with nearest neighbour and
cropped or padded exactly like it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import loaders.fields.drawing as drawing
from loaders.fields.base import Field, Piece, Reading, sized
from loaders.fields.image import hw_name, keep_problems
from loaders.format.spec import ArraySpec, array_name


@dataclass(frozen=True)
class Mask(Field):
    """Class ids (H, W) uint8 of image field `image`, resized with nearest neighbour and
    cropped or padded exactly like it (its `sizes` and `mode` are the image's)."""

    image: str = "image"
    sizes: tuple[int, ...] = ()
    mode: str = "fill"
    pad_value: int = 0
    kind = "mask"

    placed = True

    def follows(self) -> str | None:
        return "mask"

    def arrays(self, name: str) -> list[ArraySpec]:
        codec = "ragged" if self.mode == "keep" else "raw"
        return [sized(name, s, "mask", "uint8", (s, s), codec) for s in self.sizes]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return {name: batch.images(self, name)}

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        return keep_problems(name, self.image, self.sizes, 1, arrays)

    def needs(self, name: str) -> list[str]:
        return [hw_name(self.image, s) for s in self.sizes] if self.mode == "keep" else []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        size = size or self.sizes[0]
        data = piece(array_name(name, size))
        if self.mode != "keep":
            return data
        return data.reshape(*(int(v) for v in piece(hw_name(self.image, size))))

    def drawn_on(self) -> str | None:
        return self.image

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        return [drawing.blend(p, value) for p in pictures]
