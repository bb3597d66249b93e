"""Memory-mapped torch Datasets over what `prep` packs; public names are imported lazily, so
that `loaders.format` (numpy only) is usable without torch."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ImageShardDataset": "loaders.datasets.samples",
    "CenterCrop": "loaders.augment.crops",
    "RandomResizedCrop": "loaders.augment.crops",
    "TokenWindowDataset": "loaders.datasets.tokens",
    "DocumentDataset": "loaders.datasets.tokens",
    "VolumeDataset": "loaders.datasets.volumes",
    "PatchDataset": "loaders.datasets.volumes",
    "TableDataset": "loaders.datasets.tables",
    "SampleDataset": "loaders.datasets.samples",
    "ClipDataset": "loaders.datasets.clips",
    "AudioDataset": "loaders.datasets.audio",
    "MixedDataset": "loaders.datasets.mixed",
    "Normalize": "loaders.augment.normalize",
    "make_loader": "loaders.read.loader",
    "ShardSampler": "loaders.read.samplers",
    "collate_batch": "loaders.read.loader",
    "Batch": "loaders.read.loader",
    "ShardStore": "loaders.read.store",
    "LocalBackend": "loaders.read.store",
    "FormatError": "loaders.format",
    "load_manifest": "loaders.fields.checks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loaders' has no attribute {name!r}")
