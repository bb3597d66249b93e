"""The field registry: every kind of field by the name a manifest records (`fields[NAME].kind`),
one module a kind (numpy only); a new kind is a Field subclass and its line in KINDS."""

from __future__ import annotations

from typing import Any

from loaders.fields.array import Array, Scalar
from loaders.fields.audio import Audio
from loaders.fields.base import Field, FieldError, check_name  # noqa: F401  (FieldError: re-exported)
from loaders.fields.boxes import Boxes
from loaders.fields.column import Column
from loaders.fields.image import Image, Placed
from loaders.fields.instances import Instances
from loaders.fields.keypoints import Keypoints
from loaders.fields.label import Label, Labels
from loaders.fields.mask import Mask
from loaders.fields.polygons import Polygons
from loaders.fields.scores import Scores
from loaders.fields.text import Bytes, Json, Text
from loaders.fields.tokens import Tokens
from loaders.fields.video import Video
from loaders.fields.volume import Volume, VolumeLabel
from loaders.format.spec import FormatError, array_name

KINDS: dict[str, type[Field]] = {
    kind.kind: kind
    for group in (
        (Array, Scalar, Label, Labels, Column, Tokens, Scores),  # numbers
        (Text, Bytes, Json),
        (Image, Mask, Boxes, Instances, Keypoints, Polygons),  # an image, what is placed on it
        (Video, Audio, Volume, VolumeLabel),
    )
    for kind in group
}


def declared(m: Any) -> dict[str, Field]:
    """The fields of manifest `m`, checked against its arrays and `extra` once, kept on it."""
    found: dict[str, Field] | None = getattr(m, "_declared", None)
    if found is not None:
        return found
    if not isinstance(m.fields, dict) or not m.fields:
        raise FormatError("fields: fields is not a mapping of field names")
    found = {}
    for name, d in m.fields.items():
        problem = check_name(name, declared=False)  # a table's num_3 ends like a sized array
        cls = KINDS.get(str(d.get("kind"))) if isinstance(d, dict) else None
        if problem is None and cls is None:
            problem = f"field {name!r} has no kind of {sorted(KINDS)}"
        if problem is None:
            try:
                found[name] = cls.from_description(d)  # type: ignore[union-attr]
            except (TypeError, ValueError, OverflowError) as e:  # OverflowError: int(Infinity)
                problem = f"field {name!r} is not a {d['kind']} field ({e})"
        if problem is not None:
            raise FormatError(f"fields: {problem}. HINT: repack the dataset")
    claimed: dict[str, str] = {}
    for name, f in found.items():
        problem = f.check_arrays(name, m.arrays)
        if problem is not None:
            raise FormatError(problem)
        for s in f.arrays(name):
            array = array_name(s.field, s.size)
            if array in claimed:
                raise FormatError(f"array {array} is stored by fields {claimed[array]} and {name}")
            claimed[array] = name
    unclaimed = sorted(set(m.arrays) - set(claimed))
    if unclaimed:
        raise FormatError(f"array {unclaimed[0]} is not what fields declares")
    for name, f in found.items():
        if not isinstance(f, Placed):
            continue
        on = found.get(f.image) if isinstance(f.image, str) else None
        if not (isinstance(on, Image) and (tuple(f.sizes), f.mode) == (on.sizes, on.mode)):
            raise FormatError(
                f"field {name} is placed on {f.image!r:.40}, not an image field of its sizes and "
                "mode (its crops would not follow). HINT: repack the dataset"
            )
    stats = m.extra.get("stats", {})  # pixel statistics: an image field's (Image.check_extra)
    if not isinstance(stats, dict):
        raise FormatError(f"extra.stats {str(stats)[:40]} is not an object")
    others = [n for n in stats if not isinstance(found.get(n), Image)]
    if others:
        raise FormatError(f"extra.stats: {others[0]!r:.40} is not an image field")
    count = m.num_samples
    for name, f in found.items():
        f.check_extra(name, m.extra, count)
    m._declared = found
    return found


def field_of(m: Any, array: str) -> tuple[str, Field]:
    """The field (its name, and it) that stores `array` of manifest `m`."""
    for name, f in declared(m).items():
        if any(array_name(s.field, s.size) == array for s in f.arrays(name)):
            return name, f
    raise KeyError(array)
