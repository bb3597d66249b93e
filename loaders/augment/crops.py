"""Crops at load time, for `ImageShardDataset(..., crop=)`: each sample's box in its stored image,
resized to one output shape, so that samples of their own shapes (`prep pack --mode keep`) make
one batch, and a JPEG sample is decoded at a DCT-reduced scale when the box shrinks by 2 or more.

A box depends only on (seed, epoch, dataset index) and the stored image's (h, w): never on the
batch, the worker or the thread that reads it. `RandomResizedCrop` draws what the first
`loaders.transforms.RandomResizedCrop` of a pipeline draws for images of the same size (it is
that op's generator).

>>> crop = CenterCrop(224)
>>> crop.boxes(np.array([0]), np.array([[256, 320]]), epoch=0).tolist()
[[16, 48, 224, 224]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DEFAULT_CROP_RATIO = 224 / 256  # the centred square's side over the shorter side (as FFCV's)


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    if h < 1 or w < 1:
        raise ValueError(f"crop size {size} must be positive")
    return int(h), int(w)


@dataclass(frozen=True)
class CenterCrop:
    """A centred square of side `ratio` x the shorter side, resized to `size` (h, w or one int).

    The default ratio takes 224 px of a 256 px image as it is (no resize): torchvision's
    `Resize(256)` + `CenterCrop(224)` on data packed at 256 px."""

    size: tuple[int, int]
    ratio: float = DEFAULT_CROP_RATIO

    def __init__(self, size: int | Sequence[int], ratio: float = DEFAULT_CROP_RATIO):
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio {ratio} must be in (0, 1]")
        object.__setattr__(self, "size", _pair(size))
        object.__setattr__(self, "ratio", float(ratio))

    def boxes(self, index: np.ndarray, hw: np.ndarray, epoch: int) -> np.ndarray:
        """int64 (N, 4): (top, left, height, width) of each sample's box in its (h, w)."""
        hw = np.asarray(hw, dtype=np.int64).reshape(-1, 2)
        side = np.maximum(1, np.round(hw.min(axis=1) * self.ratio)).astype(np.int64)
        top, left = (hw[:, 0] - side) // 2, (hw[:, 1] - side) // 2
        return np.stack([top, left, side, side], axis=1)


@dataclass(frozen=True)
class RandomResizedCrop:
    """A box of `scale` of the image's area with aspect ratio (w / h) in `ratio`, resized to
    `size`: torchvision's algorithm, drawn per sample from (seed, epoch, index) by
    `loaders.transforms.RandomResizedCrop.boxes`. Set the epoch with `dataset.set_epoch(e)`."""

    size: tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    seed: int = 0
    _op: object = field(default=None, repr=False, compare=False)

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        seed: int = 0,
    ):
        from loaders.augment.geometry import RandomResizedCrop as Op  # checks scale and ratio

        object.__setattr__(self, "size", _pair(size))
        object.__setattr__(self, "scale", tuple(scale))
        object.__setattr__(self, "ratio", tuple(ratio))
        object.__setattr__(self, "seed", int(seed))
        object.__setattr__(self, "_op", Op(self.size, self.scale, self.ratio))

    def boxes(self, index: np.ndarray, hw: np.ndarray, epoch: int) -> np.ndarray:
        """int64 (N, 4): (top, left, height, width) of each sample's box in its (h, w)."""
        import torch

        sides = torch.from_numpy(np.asarray(hw, dtype=np.int64).reshape(-1, 2))
        idx = torch.from_numpy(np.asarray(index, dtype=np.int64).reshape(-1))
        op: Any = self._op
        out = op.boxes(idx, sides[:, 0], sides[:, 1], seed=self.seed, epoch=epoch)
        return out.numpy()


Crop = CenterCrop | RandomResizedCrop


def whole(hw: np.ndarray) -> np.ndarray:
    """Boxes (0, 0, h, w) covering images of (h, w) `hw` (N, 2): no crop."""
    return np.concatenate([np.zeros_like(hw), hw], axis=1)
