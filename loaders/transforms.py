"""Training-time augmentation of uint8 batches, per sample, reproducible, on any device.

    from loaders import Normalize, transforms as T
    aug = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), Normalize(mean, std),
                     T.MixUp(alpha=0.2, num_classes=1000)], seed=0)
    aug.set_epoch(epoch)
    x, y = aug(images, labels, index=index)      # index: the dataset's "index" field

Every op draws its random parameters per sample from (seed, epoch, op, dataset index): a sample
gets the same crop at any batch size, worker count or device, and a run resumed in the middle of
an epoch draws what the uninterrupted run drew. Each op is a fixed number of tensor operations
whatever the batch size (no loop over samples). Images are (B, C, H, W) uint8, or float after
`Normalize`; a mask (B, H, W) follows the geometric ops with nearest sampling and is never mixed.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from loaders.augment.base import Op, run
from loaders.augment.batch import Sample
from loaders.augment.color import ColorJitter
from loaders.augment.geometry import RandomCrop, RandomHorizontalFlip, RandomResizedCrop
from loaders.augment.mix import CutMix, MixUp
from loaders.augment.random import stream_key, uniform
from loaders.gpu import Normalize

__all__ = [
    "ColorJitter",
    "Compose",
    "CutMix",
    "MixUp",
    "Normalize",
    "Op",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Sample",
    "stream_key",
    "uniform",
]


def stream_names(ops: Iterable[nn.Module]) -> list[str]:
    """Each op's stream name: its class name, with "#k" for the k-th repeat of a class, so the
    first RandomResizedCrop of any pipeline draws what a decode-time RandomResizedCrop draws.

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
    """Ops applied in order to a batch: `aug(images, labels=None, *, index, mask=None)`.

    Returns the images alone, or a tuple of the images and those of labels and mask that were
    given, in that order. `Op`s see the whole batch; any other module (Normalize) gets the
    images only. `set_epoch(e)` before each epoch changes every draw; `.to(device)` moves the
    modules' buffers, and the draws are made on the batch's device."""

    def __init__(self, ops: Iterable[nn.Module], seed: int = 0, epoch: int = 0):
        super().__init__()
        self.ops = nn.ModuleList(ops)
        self.seed, self.epoch = seed, epoch
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
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        ops = [(op, self.key(name)) for name, op in zip(self._names, self.ops, strict=True)]
        return run(ops, images, labels, index=index, mask=mask)

    def key(self, name: str) -> int:
        return stream_key(self.seed, self.epoch, name)

    def extra_repr(self) -> str:
        return f"seed={self.seed}, epoch={self.epoch}"
