"""The field registry: every kind of field a dataset may have (loaders.fields.registry.KINDS),
one module a kind, each saying what it stores, how it is read and checked, and what `prep info`
says of it. Field kinds need numpy only. The package re-exports them."""

from __future__ import annotations

from loaders.fields.array import Array, Scalar  # noqa: F401
from loaders.fields.audio import Audio  # noqa: F401
from loaders.fields.base import Field, FieldError  # noqa: F401
from loaders.fields.boxes import Boxes  # noqa: F401
from loaders.fields.column import Column  # noqa: F401
from loaders.fields.image import Image  # noqa: F401
from loaders.fields.instances import Instances  # noqa: F401
from loaders.fields.keypoints import Keypoints  # noqa: F401
from loaders.fields.label import Label, Labels  # noqa: F401
from loaders.fields.mask import Mask  # noqa: F401
from loaders.fields.registry import KINDS, declared  # noqa: F401
from loaders.fields.text import Bytes, Json, Text  # noqa: F401
from loaders.fields.tokens import Tokens  # noqa: F401
from loaders.fields.video import Video  # noqa: F401
from loaders.fields.volume import Volume, VolumeLabel  # noqa: F401
