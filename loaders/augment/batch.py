"""The batch a pipeline works on (Sample, its pending crop: Resize), and the tensor helpers of
the ops."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from loaders.augment.boxes import Targets

Masks = dict[str, torch.Tensor | None]


@dataclass
class Sample:
    """A batch on its way through a pipeline: images (B, C, H, W) uint8 or float; labels int64
    (B,), or float (B, classes) once mixed; mask uint8 (B, H, W); index int64 (B,), the dataset
    indices the draws come from; pending, a resized crop not made yet, so that the ops after it
    fold into one sampling; targets in the pixels of `canvas`; instances uint8 (B, H, W, N), a
    0/1 mask per box (N last, so that a mask's gathers serve it)."""

    images: torch.Tensor
    index: torch.Tensor
    labels: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    pending: Resize | None = None
    targets: Targets | None = None
    instances: torch.Tensor | None = None

    @property
    def canvas(self) -> tuple[int, int]:
        """(H, W) of the images once the pending crop is made."""
        if self.pending is not None:
            return self.pending.size
        H, W = self.images.shape[-2:]
        return int(H), int(W)

    def masks(self, move: Callable[[torch.Tensor, int], torch.Tensor], fill: int = 0) -> Masks:
        """The mask and the instances through move(x, fill) (the instances' fill: 0), for `but`."""
        m, i = self.mask, self.instances
        return {
            "mask": None if m is None else move(m, fill),
            "instances": None if i is None else move(i, 0),
        }

    def but(self, **changes: Any) -> Sample:
        """A copy with some tensors replaced: ops never change the batch they were given."""
        return replace(self, **changes)


@dataclass
class Resize:
    """Each sample's box (top, left, height, width), int64 (B, 4), to resample to `size`, and
    whether to mirror its columns (bool (B,), None for none): a crop and its flip in one pass."""

    boxes: torch.Tensor
    size: tuple[int, int]
    flip: torch.Tensor | None = None


NUMPY = {torch.uint8: np.uint8, torch.float32: np.float32, torch.float64: np.float64}
HUGE = 1 << 22  # numpy madvises huge pages for buffers of 4 MiB and more


def empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.empty, but large CPU buffers come from numpy, which asks Linux for huge pages:
    torch's page faults per 4 KiB cost more than the op that fills the buffer (154 MB: ~100 ms,
    not ~30)."""
    size = math.prod(shape) * dtype.itemsize
    if device.type == "cpu" and dtype in NUMPY and size >= HUGE:
        return torch.from_numpy(np.empty(shape, dtype=NUMPY[dtype]))
    return torch.empty(shape, dtype=dtype, device=device)


def empty_like(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor of x's shape, device and layout (channels-last or contiguous)."""
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        B, C, H, W = x.shape
        return empty((B, H, W, C), dtype, x.device).permute(0, 3, 1, 2)
    return empty(tuple(x.shape), dtype, x.device)


def to_images(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """An op's float result `x` (rounded in place) in the dtype of `like`. For uint8, x must lie
    in 0..255 (blends and bilinear samples of pixels do), so +0.5 and truncation round it."""
    if like.dtype == torch.uint8:
        return empty_like(x, torch.uint8).copy_(x.add_(0.5))
    return x.to(like.dtype)


def working(x: torch.Tensor) -> torch.Tensor:
    """The float form an op computes in: float32 for uint8, the float dtype itself otherwise."""
    return x if x.is_floating_point() else empty_like(x, torch.float32).copy_(x)
