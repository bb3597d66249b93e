"""What every batch augmentation shares: the batch it works on and the draws it makes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from loaders.augment.random import uniform


@dataclass
class Sample:
    """A batch on its way through a pipeline.

    images: (B, C, H, W), uint8 or float; labels: int64 (B,) class ids, or float (B, classes)
    soft labels once mixed; mask: uint8 (B, H, W), moved by geometric ops only; index: int64 (B,),
    the dataset index of each sample, which its random draws are made from."""

    images: torch.Tensor
    index: torch.Tensor
    labels: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    def but(self, **changes: Any) -> Sample:
        """A copy with some tensors replaced: ops never change the batch they were given."""
        return replace(self, **changes)


class Op(nn.Module):
    """One batch augmentation: `augment(sample, key)` with the key of its stream of draws.

    Called alone, `op(images, labels, index=index, mask=mask)` runs it as a one-op pipeline
    (see loaders.transforms.Compose, which gives each op its key from (seed, epoch))."""

    def augment(self, sample: Sample, key: int) -> Sample:
        raise NotImplementedError

    def draws(self, key: int, sample: Sample, k: int) -> torch.Tensor:
        """k uniforms per sample, float64 (B, k), on the batch's device."""
        return uniform(key, sample.index.to(sample.images.device), k)

    def forward(
        self, images: torch.Tensor, labels: torch.Tensor | None = None, **kw: Any
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """`kw`: index= and mask= as for Compose, and seed=, epoch= (default 0)."""
        from loaders.transforms import Compose

        seed, epoch = kw.pop("seed", 0), kw.pop("epoch", 0)
        return Compose([self], seed=seed, epoch=epoch)(images, labels, **kw)


def to_images(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """An op's float result `x` (a new tensor, rounded in place) back to the dtype of `like`:
    uint8 input gives uint8 output, float input stays float. For uint8, x must lie in 0..255
    (blends and bilinear samples of pixels do), so +0.5 and truncation round it."""
    if like.dtype == torch.uint8:
        return x.add_(0.5).to(torch.uint8)
    return x.to(like.dtype)


def working(x: torch.Tensor) -> torch.Tensor:
    """The float form an op computes in: float32 for uint8, the float dtype itself otherwise."""
    return x.to(torch.float32) if not x.is_floating_point() else x


def per_sample(values: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(B,) values shaped to broadcast over x (B, ...), in x's working dtype."""
    return values.to(working(x[:0]).dtype).view(-1, *([1] * (x.dim() - 1)))
