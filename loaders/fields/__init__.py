"""The field registry: every kind of field a dataset may have (loaders.fields.registry.KINDS),
one module a kind, each saying what it stores, how it is read and checked, and what `prep info`
says of it. Field kinds need numpy only."""

from __future__ import annotations

from loaders.fields.array import Array, Scalar
from loaders.fields.audio import Audio
from loaders.fields.base import Field, FieldError
from loaders.fields.boxes import Boxes
from loaders.fields.column import Column
from loaders.fields.image import Image
from loaders.fields.instances import Instances
from loaders.fields.keypoints import Keypoints
from loaders.fields.label import Label, Labels
from loaders.fields.mask import Mask
from loaders.fields.registry import KINDS, declared
from loaders.fields.text import Bytes, Json, Text
from loaders.fields.tokens import Tokens
from loaders.fields.video import Video
from loaders.fields.volume import Volume, VolumeLabel

__all__ = [
    "KINDS",
    "Array",
    "Audio",
    "Boxes",
    "Bytes",
    "Column",
    "Field",
    "FieldError",
    "Image",
    "Instances",
    "Json",
    "Keypoints",
    "Label",
    "Labels",
    "Mask",
    "Scalar",
    "Text",
    "Tokens",
    "Video",
    "Volume",
    "VolumeLabel",
    "declared",
]
