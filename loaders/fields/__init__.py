"""Samples of any shape: declared fields (loaders.fields.registry.KINDS), read back by
`SampleDataset` as dicts of batches. Field kinds need numpy only; SampleDataset needs torch and
is imported when first asked for."""

from __future__ import annotations

import importlib
from typing import Any

from loaders.fields.array import Array, Label, Scalar, Tokens
from loaders.fields.base import FieldError, SampleField
from loaders.fields.image import Boxes, Image, Keypoints, Mask
from loaders.fields.instances import Instances
from loaders.fields.registry import KINDS
from loaders.fields.text import Bytes, Json, Text
from loaders.fields.video import Video

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
        return getattr(importlib.import_module("loaders.datasets.samples"), name)
    raise AttributeError(f"module 'loaders.fields' has no attribute {name!r}")
