"""Crops at load time (`ImageShardDataset(..., crop=)`): each sample's box in its stored image,
resized to one shape; a box depends only on (seed, epoch, dataset index) and the image's (h, w).

>>> CenterCrop(224).boxes(np.array([0]), np.array([[256, 320]]), epoch=0).tolist()
[[16, 48, 224, 224]]
>>> CenterCrop(224, ratio=0.5).boxes(np.array([0]), np.array([[256, 320]]), epoch=0).tolist()
[[64, 96, 128, 128]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from loaders.augment import geometry


@dataclass(frozen=True)
class CenterCrop:
    """The centred `size` crop of each stored image, or with `ratio` a centred square of `ratio`
    x the shorter side: `Resize(256)` + `CenterCrop(224)` is `CenterCrop(224, ratio=0.875)`.

    Examples:
        >>> from loaders import CenterCrop, SampleDataset
        >>> ds = SampleDataset("data/demo-samples", fields=("image", "boxes"), crop=CenterCrop(224))
        >>> ds[0]["image"].shape  # stored with the longer side 256 (--mode keep)
        torch.Size([3, 224, 224])
    """

    size: tuple[int, int]
    ratio: float | None = None

    def __init__(self, size: int | Sequence[int], ratio: float | None = None):
        if ratio is not None and not 0 < ratio <= 1:
            raise ValueError(f"ratio {ratio} must be in (0, 1]")
        object.__setattr__(self, "size", geometry.pair(size, "crop size"))
        object.__setattr__(self, "ratio", None if ratio is None else float(ratio))

    def boxes(self, index: np.ndarray, hw: np.ndarray, epoch: int) -> np.ndarray:
        """int64 (N, 4): (top, left, height, width) of each sample's box in its (h, w)."""
        hw = np.asarray(hw, dtype=np.int64).reshape(-1, 2)
        if self.ratio is None:  # torchvision's rounding: half to even, as round()
            side = np.minimum(hw, np.asarray(self.size, dtype=np.int64))
            top_left = np.round((hw - side) / 2.0).astype(np.int64)
        else:  # FFCV's: the odd pixel after
            square = np.maximum(1, np.round(hw.min(axis=1) * self.ratio)).astype(np.int64)
            side = np.stack([square, square], axis=1)
            top_left = (hw - side) // 2
        return np.concatenate([top_left, side], axis=1)


@dataclass(frozen=True)
class RandomResizedCrop:
    """The boxes `loaders.transforms.RandomResizedCrop` draws as a pipeline's first op.

    Examples:
        >>> from loaders import RandomResizedCrop, SampleDataset
        >>> ds = SampleDataset("data/demo-samples", fields=("image", "boxes"),
        ...                    crop=RandomResizedCrop(128, seed=0))
        >>> ds.set_epoch(1)  # new boxes each epoch, the same for any worker count
        >>> ds[0]["image"].shape
        torch.Size([3, 128, 128])
    """

    size: tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    seed: int = 0
    _op: Any = field(default=None, repr=False, compare=False)

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        seed: int = 0,
    ):
        object.__setattr__(self, "size", geometry.pair(size, "crop size"))
        object.__setattr__(self, "scale", tuple(scale))
        object.__setattr__(self, "ratio", tuple(ratio))
        object.__setattr__(self, "seed", int(seed))
        op = geometry.RandomResizedCrop(self.size, self.scale, self.ratio)  # checks them
        object.__setattr__(self, "_op", op)

    def boxes(self, index: np.ndarray, hw: np.ndarray, epoch: int) -> np.ndarray:
        """int64 (N, 4): (top, left, height, width) of each sample's box in its (h, w)."""
        sides = torch.from_numpy(np.asarray(hw, dtype=np.int64).reshape(-1, 2))
        idx = torch.from_numpy(np.asarray(index, dtype=np.int64).reshape(-1))
        return self._op.boxes(idx, sides[:, 0], sides[:, 1], seed=self.seed, epoch=epoch).numpy()


Crop = CenterCrop | RandomResizedCrop


def whole(hw: np.ndarray) -> np.ndarray:
    """Boxes (0, 0, h, w) covering images of (h, w) `hw` (N, 2): no crop."""
    return np.concatenate([np.zeros_like(hw), hw], axis=1)
