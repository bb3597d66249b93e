"""Samples of any shape: declared fields (loaders.samples.registry.KINDS), read back by
`SampleDataset` as dicts of batches. Field kinds need numpy only; SampleDataset needs torch and
is imported when first asked for."""

from __future__ import annotations

import importlib
from typing import Any

from loaders.samples.arrays import Array, Label, Scalar, Tokens
from loaders.samples.fields import FieldError, SampleField
from loaders.samples.image import Boxes, Image, Keypoints, Mask
from loaders.samples.instances import Instances
from loaders.samples.registry import KINDS
from loaders.samples.text import Bytes, Json, Text
from loaders.samples.video import Video

__all__ = [
    "KINDS",
    "Array",
    "Boxes",
    "Bytes",
    "FieldError",
    "Image",
    "Instances",
    "Json",
    "Keypoints",
    "Label",
    "Mask",
    "SampleDataset",
    "SampleField",
    "Scalar",
    "Text",
    "Tokens",
    "Video",
]


def __getattr__(name: str) -> Any:
    if name in ("SampleDataset", "SampleBatch"):
        return getattr(importlib.import_module("loaders.samples.dataset"), name)
    raise AttributeError(f"module 'loaders.samples' has no attribute {name!r}")
