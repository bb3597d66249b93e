"""The roles of the fields read in a `transforms=` or `crop=` call (image, mask, boxes...), and
the calls themselves: each field moved as its kind says (Field.follows); the boxes left under
1 px go with their keypoints, instances and per-box rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from loaders.augment.boxes import Targets, outputs, per_box
from loaders.augment.crops import RandomResizedCrop as ReadCrop
from loaders.fields.base import Field
from loaders.transforms import Compose, RandomResizedCrop

MIN_SIZE = 1.0  # px a clipped box keeps each way: SanitizeBoundingBoxes' default, Compose's
ROLES = ("image", "mask", "boxes", "keypoints", "instances", "per_box", "label")


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


def _one(
    read: Mapping[str, Field],
    role: str,
    root: object,
    image: str | None = None,
    by: str = "transforms=",
) -> str | None:
    """The one field read in `role` (of image field `image`, where given), or None."""
    names = _as(read, role, image)
    if len(names) > 1:
        raise ValueError(
            f"{root}: {by} moves one {role} field, and fields= reads {names}. "
            f"HINT: read one of them with fields="
        )
    return names[0] if names else None


def _as(read: Mapping[str, Field], role: str, image: str | None = None) -> list[str]:
    """The fields read that a pipeline moves as `role` (of image field `image`, where given)."""
    of = [f for f, d in read.items() if d.follows() == role]
    return [f for f in of if image is None or getattr(read[f], "image", None) == image]


def roles_of(read: Mapping[str, Field], fields: Sequence[str], root: object) -> Roles:
    """The role of each field `read`; a ValueError with the fix where a pipeline cannot serve."""
    unmoved = [f for f, d in read.items() if d.placed and d.follows() not in ROLES]
    if unmoved:
        raise ValueError(
            f"{root}: transforms= does not move field {unmoved[0]} "
            f"({read[unmoved[0]].kind}). HINT: read it without transforms=, or with crop="
        )
    boxes = _one(read, "boxes", root)
    of = getattr(read[boxes], "image", None) if boxes is not None else None
    image = _one(read, "image", root) if of is None else of if of in read else None
    if image is None:
        raise ValueError(f"{root}: transforms= needs an image field among fields={tuple(fields)}")
    label, mask = _one(read, "label", root), _one(read, "mask", root, image)
    return _instances(read, Roles(image, mask, boxes, label=label), root, "transforms=")


def crop_roles(read: Mapping[str, Field], root: object) -> Roles | None:
    """What a load-time `crop=` drops with a box it cuts away; None when no boxes are read."""
    boxes = _one(read, "boxes", root, by="crop=")
    if boxes is None:
        return None
    image: str = read[boxes].image  # type: ignore[attr-defined]
    return _instances(read, Roles(image, boxes=boxes), root, "crop=")


def _instances(read: Mapping[str, Field], r: Roles, root: object, by: str) -> Roles:
    """Roles `r` with its image's keypoints and instances, and the per-box fields."""
    instances = _one(read, "instances", root, r.image, by)
    if instances is not None and r.boxes is None:
        raise ValueError(f"{root}: instance masks move with their boxes: read 'boxes' too")
    per_box = tuple(_as(read, "per_box")) if r.boxes is not None else ()
    keypoints = _one(read, "keypoints", root, r.image, by)
    return replace(r, keypoints=keypoints, instances=instances, per_box=per_box)


def read_crop(aug: Any) -> tuple[Any, Any] | None:
    """Compose `aug`'s leading (and only) RandomResizedCrop as a load-time crop, and the rest."""
    ops = list(aug.ops)
    crops = [op for op in ops if isinstance(op, RandomResizedCrop)]
    if len(crops) != 1 or ops[0] is not crops[0]:
        return None
    first = crops[0]
    crop = ReadCrop(first.size, first.scale, first.ratio, seed=aug.seed)
    rest = Compose(ops[1:], aug.seed, aug.epoch, aug.min_size, cpu_kernel=aug.cpu_kernel)
    return crop, rest


def transform(
    aug: Any, out: dict[str, Any], r: Roles, index: np.ndarray, epoch: int
) -> dict[str, Any]:
    """The batch `out` with the fields of roles `r` through Compose `aug` at `epoch`."""
    if aug.epoch != epoch:  # the dataset's set_epoch reaches the workers' copies so
        aug.set_epoch(epoch)
    kw, padded = _given(out, r)
    kw["index"] = torch.from_numpy(np.asarray(index, dtype=np.int64))
    if r.mask is not None:
        kw["mask"] = out[r.mask]
    args = (out[r.image],) if r.label is None else (out[r.image], out[r.label])
    got = aug(*args, **kw)
    got = list(got) if isinstance(got, tuple) else [got]
    new = dict(out) | {f: got.pop(0) for f in (r.image, r.label, r.mask) if f is not None}
    return _returned(new, got, r, padded)


def drop_cut_boxes(
    out: dict[str, Any], r: Roles, batch: int, hw: tuple[int, int]
) -> dict[str, Any]:
    """The batch `out` without the boxes a load-time crop to `hw` cut, as a pipeline's end."""
    if batch == 0:  # nothing to drop (and a list of no keypoints has no row shape)
        return out
    kw, padded = _given(out, r)
    lengths = kw.get("lengths")
    t = Targets.of(batch, kw["boxes"], kw.get("keypoints"), lengths)
    stack: torch.Tensor | None = None
    if r.instances is not None:  # (B, H, W, N), as a pipeline moves them
        stack = per_box(kw["instances"], lengths, t, r.instances).permute(0, 2, 3, 1)
    return _returned(dict(out), outputs(t, hw, MIN_SIZE, kw, lengths, stack), r, padded)


def _given(out: dict[str, Any], r: Roles) -> tuple[dict[str, Any], list[str]]:
    """The batch's boxes, keypoints... as a pipeline takes them, and those read padded."""
    ragged = [f for f in (r.boxes, r.keypoints, r.instances, *r.per_box) if f is not None]
    padded = [f for f in ragged if f"{f}_len" in out]
    named = {"boxes": r.boxes, "keypoints": r.keypoints, "instances": r.instances}
    kw: dict[str, Any] = {k: out[f] for k, f in named.items() if f is not None}
    if padded:
        kw["lengths"] = out[f"{padded[0]}_len"]
    if r.per_box:
        kw["per_box"] = {f: out[f] for f in r.per_box}
    return kw, padded


def _returned(new: dict[str, Any], got: list[Any], r: Roles, padded: list[str]) -> dict[str, Any]:
    """`new` with what a pipeline returned of the instances (`got`, in outputs' order)."""
    new |= {f: got.pop(0) for f in (r.boxes, r.keypoints, r.instances) if f is not None}
    if padded:
        lengths = got.pop(0)
        new |= {f"{f}_len": lengths for f in padded}
    if r.per_box:
        new |= got.pop(0)
    return new
