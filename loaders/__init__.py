"""Memory-mapped torch Datasets over what `prep` packs; public names are imported lazily, so
that `loaders.format` (numpy only) is usable without torch."""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {  # where each public name lives
    "loaders.datasets.samples": ("ImageShardDataset", "SampleDataset"),
    "loaders.datasets.audio": ("AudioDataset",),
    "loaders.datasets.tokens": ("TokenWindowDataset", "DocumentDataset"),
    "loaders.datasets.volumes": ("VolumeDataset", "PatchDataset"),
    "loaders.datasets.tables": ("TableDataset",),
    "loaders.datasets.clips": ("ClipDataset",),
    "loaders.datasets.mixed": ("MixedDataset",),
    "loaders.datasets.packed": ("PackedDataset",),
    "loaders.augment.crops": ("CenterCrop", "RandomResizedCrop"),
    "loaders.augment.normalize": ("Normalize",),
    "loaders.read.loader": ("make_loader", "collate_batch", "Batch"),
    "loaders.read.samplers": ("ShardSampler",),
    "loaders.read.store": ("ShardStore", "LocalBackend"),
    "loaders.format": ("FormatError",),
    "loaders.fields.checks": ("load_manifest",),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loaders' has no attribute {name!r}")
