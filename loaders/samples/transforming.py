"""`SampleDataset(transforms=)`: a loaders.transforms.Compose run on each batch read, the
image field's pixels with its mask, boxes and keypoints moving along, and the boxes it leaves
degenerate dropped with their per-box fields. For an image packed with mode keep, a
pipeline's leading RandomResizedCrop becomes the dataset's crop (read_crop).

Which field is what comes from the declarations: the image is the one Image field read (or
the one the boxes are of); its Mask, Boxes, Keypoints and Instances fields follow it (the
instance masks as the mask, nearest); every ragged `Array` field read (COCO's labels, iscrowd
and area) is per-box, a row per box; keypoints, instance masks and per-box rows go with their
dropped boxes. A `Label` field is the images' class (MixUp and CutMix soften it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from loaders.samples.arrays import Array, Label
from loaders.samples.fields import SampleField
from loaders.samples.image import Boxes, Image, Keypoints, Mask
from loaders.samples.instances import Instances


@dataclass(frozen=True)
class Roles:
    """The fields a pipeline is given, by their role in the call."""

    image: str
    mask: str | None = None
    boxes: str | None = None
    keypoints: str | None = None
    instances: str | None = None
    label: str | None = None
    per_box: tuple[str, ...] = ()


def _one(names: list[str], role: str, root: object) -> str | None:
    if len(names) > 1:
        raise ValueError(
            f"{root}: transforms= moves one {role} field, and fields= reads {names}. "
            f"HINT: read one of them with fields="
        )
    return names[0] if names else None


def roles_of(declared: Mapping[str, SampleField], fields: Sequence[str], root: object) -> Roles:
    """Each field's role (see the module's docstring); a dataset a pipeline cannot serve is a
    ValueError with the fix."""
    read = {f: declared[f] for f in fields if f in declared}
    of = lambda kind: [f for f, d in read.items() if isinstance(d, kind)]  # noqa: E731
    boxes = _one(of(Boxes), "boxes", root)
    images = of(Image)
    if boxes is not None:
        images = [f for f in images if f == read[boxes].image]  # type: ignore[attr-defined]
    image = _one(images, "image", root)
    if image is None:
        raise ValueError(f"{root}: transforms= needs an image field among fields={tuple(fields)}")

    def follows(kind: type[SampleField], role: str) -> str | None:
        return _one([f for f in of(kind) if getattr(read[f], "image", None) == image], role, root)

    instances = follows(Instances, "instances")
    if instances is not None and boxes is None:
        raise ValueError(f"{root}: instance masks move with their boxes: read 'boxes' too")
    per_box = [f for f, d in read.items() if isinstance(d, Array) and d.is_ragged()]
    label = _one([f for f in of(Label) if type(read[f]) is Label], "label", root)
    return Roles(
        image,
        follows(Mask, "mask"),
        boxes,
        follows(Keypoints, "keypoints"),
        instances,
        label,
        tuple(per_box) if boxes is not None else (),
    )


def read_crop(aug: Any) -> tuple[Any, Any] | None:
    """For an image field packed with mode keep (samples of their own shapes, which make no
    batch): Compose `aug`'s leading RandomResizedCrop as the dataset's `crop=` (it draws the
    same boxes: loaders.crops), and the pipeline's other ops; None when `aug` does not start
    with the only RandomResizedCrop of the pipeline."""
    from loaders.crops import RandomResizedCrop as ReadCrop
    from loaders.transforms import Compose, RandomResizedCrop

    ops = list(aug.ops)
    if not ops or sum(isinstance(op, RandomResizedCrop) for op in ops) != 1:
        return None
    first = ops[0]
    if not isinstance(first, RandomResizedCrop):
        return None
    crop = ReadCrop(first.size, first.scale, first.ratio, seed=aug.seed)
    return crop, Compose(ops[1:], seed=aug.seed, epoch=aug.epoch, min_size=aug.min_size)


def transform(
    aug: Any, out: dict[str, Any], roles: Roles, index: np.ndarray, epoch: int
) -> dict[str, Any]:
    """The batch `out` (field -> its batch) through Compose `aug` at `epoch`: the fields of
    `roles` replaced by what it returns, and each padded one's NAME_len by the rows kept."""
    if aug.epoch != epoch:  # the dataset's set_epoch reaches the workers' copies so
        aug.set_epoch(epoch)
    r = roles
    ragged = [f for f in (r.boxes, r.keypoints, r.instances, *r.per_box) if f is not None]
    padded = [f for f in ragged if f"{f}_len" in out]
    kw: dict[str, Any] = {"index": torch.from_numpy(np.asarray(index, dtype=np.int64))}
    named = {"mask": r.mask, "boxes": r.boxes, "keypoints": r.keypoints, "instances": r.instances}
    kw |= {k: out[f] for k, f in named.items() if f is not None}
    if padded:
        kw["lengths"] = out[f"{padded[0]}_len"]
    if r.per_box:
        kw["per_box"] = {f: out[f] for f in r.per_box}
    args = (out[r.image],) if r.label is None else (out[r.image], out[r.label])
    got = aug(*args, **kw)
    got = list(got) if isinstance(got, tuple) else [got]
    new = dict(out)
    new[r.image] = got.pop(0)
    for f in (r.label, r.mask, r.boxes, r.keypoints, r.instances):
        if f is not None:
            new[f] = got.pop(0)
    if padded:
        lengths = got.pop(0)
        new |= {f"{f}_len": lengths for f in padded}
    if r.per_box:
        new |= got.pop(0)
    return new
