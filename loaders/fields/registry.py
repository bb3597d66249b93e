"""The sample field kinds, by the name the manifest records (`extra.fields[NAME].kind`).
Adding a kind: a SampleField subclass in its own module, and its entry here."""

from __future__ import annotations

from typing import Any

from loaders.fields.array import Array, Label, Scalar, Tokens
from loaders.fields.base import SampleField, check_name
from loaders.fields.image import Boxes, Image, Keypoints, Mask
from loaders.fields.instances import Instances
from loaders.fields.text import Bytes, Json, Text
from loaders.fields.video import Video
from loaders.format.spec import ArraySpec, FormatError, array_name
from loaders.format.stats import check_stats as stats_of

KINDS: dict[str, type[SampleField]] = {
    cls.kind: cls
    for cls in (
        Array,
        Scalar,
        Label,
        Tokens,
        Text,
        Bytes,
        Json,
        Image,
        Mask,
        Boxes,
        Instances,
        Keypoints,
        Video,
    )
}


def fields_from(described: Any, source: object) -> dict[str, SampleField]:
    """The fields a manifest's `extra.fields` describes; FormatError naming `source` if odd."""
    if not isinstance(described, dict) or not described:
        raise FormatError(f"{source}: extra.fields is not a mapping of field names")
    out: dict[str, SampleField] = {}
    for name, d in described.items():
        problem = check_name(name)
        cls = KINDS.get(str(d.get("kind"))) if isinstance(d, dict) else None
        if problem is None and cls is None:
            problem = f"field {name!r} has no kind of {sorted(KINDS)}"
        if problem is None:
            try:
                out[name] = cls.from_description(d)  # type: ignore[union-attr]
            except (TypeError, ValueError) as e:
                problem = f"field {name!r} is not a {d['kind']} field ({e})"
        if problem is not None:
            raise FormatError(f"{source}: {problem}. HINT: repack the dataset")
    return out


def check_manifest(extra: dict[str, Any], arrays: dict[str, ArraySpec], count: int) -> None:
    """The fields of `extra.fields` store exactly the manifest's arrays, as they declare them."""
    fields = fields_from(extra.get("fields"), "extra.fields")
    declared = {
        array_name(s.field, s.size): s for name, f in fields.items() for s in f.arrays(name)
    }
    if declared != arrays:
        odd = sorted(set(declared) ^ set(arrays)) or [
            n for n in arrays if declared.get(n) != arrays[n]
        ]
        raise FormatError(f"array {odd[0]} is not what extra.fields declares")
    for name, f in fields.items():  # a mask, boxes, keypoints or instances: placed on an image
        image = getattr(f, "image", None)
        on = fields.get(image) if isinstance(image, str) else None
        like = (tuple(getattr(f, "sizes", ())), getattr(f, "mode", None))
        placed = isinstance(on, Image) and like == (on.sizes, on.mode)
        if image is not None and not placed:
            raise FormatError(
                f"extra.fields: field {name} is placed on {image!r:.40}, not an image field of "
                "its sizes and mode (its crops would not follow). HINT: repack the dataset"
            )
    check_stats(extra.get("stats", {}), fields)


def check_stats(stats: Any, fields: dict[str, SampleField]) -> None:
    """`extra.stats`: per Image field, what an images dataset's extra.stats holds (format.extras
    .check_stats) at the field's sizes."""
    if not isinstance(stats, dict):
        raise FormatError(f"extra.stats {str(stats)[:40]} is not an object")
    for name, got in stats.items():
        field = fields.get(name)
        if not isinstance(field, Image):
            raise FormatError(f"extra.stats: {name!r:.40} is not an image field")
        stats_of(got, f"extra.stats.{name}", field.sizes, field.channels)
