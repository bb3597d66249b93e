"""Per-sample, reproducible augmentation of a batch on any device: `aug = T.Compose([...],
seed=0)`, `x, y = aug(images, labels, index=index)` (docs/loading.md, "Augmentation on the
batch")."""

from __future__ import annotations

from loaders.augment.base import Compose, Op, Sample
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
