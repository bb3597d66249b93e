"""The fields a sample may have, for `prep.pack_samples` and a recipe's FIELDS (docs/samples.md)."""

from loaders.fields import Array, Bytes, Json, Label, Labels, Scalar, Text
from prep.fields.image import Boxes, Image, Instances, Keypoints, Mask, Polygons, Tokens

__all__ = [
    "Array",
    "Boxes",
    "Bytes",
    "Image",
    "Instances",
    "Json",
    "Keypoints",
    "Label",
    "Labels",
    "Mask",
    "Polygons",
    "Scalar",
    "Text",
    "Tokens",
]
