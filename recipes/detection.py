"""The demo's detection-and-caption samples (`prep demo` writes detection.jsonl):

    prep samples data/demo-raw/detection.jsonl data/demo-samples --recipe recipes/detection.py

Each row becomes an image kept at its aspect ratio (longer side 256, JPEG), its boxes (x0, y0,
x1, y1 as fractions of the image, so they hold at any stored size), their class ids, a caption
and the row's id as metadata.
"""

import numpy as np

from prep import Reject
from prep.fields import Array, Image, Json, Text

CLASSES = ("circle", "square", "triangle", "cross")

FIELDS = {
    "image": Image(sizes=(256,), mode="keep", codec="jpeg"),
    "boxes": Array("float32", (None, 4), finite=True),
    "labels": Array("int64", (None,)),
    "caption": Text(),
    "meta": Json(),
}


def make(row: dict) -> dict:
    unknown = [c for c in row["labels"] if c not in CLASSES]
    if unknown:
        raise Reject(f"class {unknown[0]!r} is not one of {CLASSES}")
    return {
        "image": row["path"],  # relative to the .jsonl file's folder
        "boxes": np.asarray(row["boxes"], np.float32).reshape(-1, 4),
        "labels": np.asarray([CLASSES.index(c) for c in row["labels"]], np.int64),
        "caption": row["caption"],
        "meta": {"id": row["id"]},
    }
