"""Training-side readers for datasets packed by `prep`: memory-mapped torch Datasets.

Public names are imported lazily so that `loaders.format` (numpy only) can be used without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ImageShardDataset": "loaders.images",
    "CenterCrop": "loaders.crops",
    "RandomResizedCrop": "loaders.crops",
    "TokenWindowDataset": "loaders.tokens",
    "DocumentDataset": "loaders.tokens",
    "VolumeDataset": "loaders.volumes",
    "PatchDataset": "loaders.volumes",
    "TableDataset": "loaders.tables",
    "SampleDataset": "loaders.samples.dataset",
    "ClipDataset": "loaders.clips",
    "AudioDataset": "loaders.audio",
    "MixedDataset": "loaders.mixed",
    "Normalize": "loaders.gpu",
    "make_loader": "loaders.loader",
    "ShardSampler": "loaders.samplers",
    "collate_batch": "loaders.loader",
    "Batch": "loaders.loader",
    "ShardStore": "loaders.store",
    "LocalBackend": "loaders.store",
    "FormatError": "loaders.format",
    "load_manifest": "loaders.format",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loaders' has no attribute {name!r}")
