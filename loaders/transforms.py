"""Training-time augmentation of uint8 batches, per sample, reproducible, on any device.

    from loaders import Normalize, transforms as T
    aug = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), Normalize(mean, std),
                     T.MixUp(alpha=0.2, num_classes=1000)], seed=0)
    aug.set_epoch(epoch)
    x, y = aug(images, labels, index=index)      # index: the dataset's "index" field
    x, boxes, extra = aug(images, index=index, boxes=boxes, per_box={"labels": labels})

Each op draws per sample from (seed, epoch, op, dataset index): the same crop at any batch size,
worker count or device, and after a resume mid-epoch. A mask (B, H, W) follows the geometric ops
(nearest), never mixed; boxes and keypoints move with the pixels, and the boxes left narrower or
lower than `min_size` px are dropped with their keypoints and per_box rows (torchvision's
SanitizeBoundingBoxes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from loaders.augment.base import Op, Sample, run
from loaders.augment.boxes import Ragged
from loaders.augment.color import ColorJitter
from loaders.augment.geometry import (
    CenterCrop,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
)
from loaders.augment.mix import CutMix, MixUp
from loaders.augment.normalize import Normalize
from loaders.augment.random import stream_key, uniform

__all__ = [
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "CutMix",
    "MixUp",
    "Normalize",
    "Op",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomVerticalFlip",
    "Resize",
    "Sample",
    "stream_key",
    "uniform",
]


def stream_names(ops: Iterable[nn.Module]) -> list[str]:
    """Each op's stream name: its class name, "#k" for its k-th repeat (a pipeline's first
    RandomResizedCrop draws what a decode-time one draws).

    >>> stream_names([RandomHorizontalFlip(), RandomCrop(8), RandomHorizontalFlip()])
    ['RandomHorizontalFlip', 'RandomCrop', 'RandomHorizontalFlip#1']
    """
    seen: dict[str, int] = {}
    names = []
    for op in ops:
        cls = type(op).__name__
        k = seen[cls] = seen.get(cls, -1) + 1
        names.append(cls if k == 0 else f"{cls}#{k}")
    return names


class Compose(nn.Module):
    """Ops applied in order to a batch (any other module than an Op, as Normalize, gets the
    images only). Returns the images alone, or a tuple of the images and those of labels, mask,
    boxes, keypoints (N, K, 3), instances (N, H, W), lengths and per_box that were given, in
    that order, each in the form given (a list, nested, or padded with lengths=), on the images'
    device. `set_epoch(e)` before each epoch changes every draw."""

    def __init__(
        self, ops: Iterable[nn.Module], seed: int = 0, epoch: int = 0, min_size: float = 1.0
    ):
        super().__init__()
        self.ops = nn.ModuleList(ops)
        self.seed, self.epoch, self.min_size = seed, epoch, min_size
        stream_key(seed, epoch, "")  # refuse a negative seed or epoch now
        self._names = stream_names(self.ops)

    def set_epoch(self, epoch: int) -> None:
        stream_key(self.seed, epoch, "")
        self.epoch = epoch

    def forward(
        self,
        images: torch.Tensor,
        labels: torch.Tensor | None = None,
        *,
        index: torch.Tensor,
        mask: torch.Tensor | None = None,
        boxes: Ragged = None,
        keypoints: Ragged = None,
        instances: Ragged = None,
        lengths: torch.Tensor | None = None,
        per_box: Mapping[str, Ragged] | None = None,
    ) -> torch.Tensor | tuple[Any, ...]:
        keys = [stream_key(self.seed, self.epoch, name) for name in self._names]
        kw = {"mask": mask, "boxes": boxes, "keypoints": keypoints, "instances": instances}
        kw |= {"lengths": lengths, "per_box": per_box, "min_size": self.min_size}
        return run(list(zip(self.ops, keys, strict=True)), images, labels, index=index, **kw)

    def extra_repr(self) -> str:
        return f"seed={self.seed}, epoch={self.epoch}"
