"""A COCO file's images as inputs: each entry parsed with its annotations, its boxes checked (a
frame size at a time: numpy over every box of the images of that size), then made an input or
a reject. A plain function of the parsed JSON (`coco_images`), which opens no image file but
those of images whose boxes lie outside the frame the JSON claims (to tell `box_frame` from
`box_outside`).

What is refused before any work: a file_name that leaves IMAGES (`outside`), a frame of more
pixels than --max-pixels (`too_large`), a malformed entry, an unknown category.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prep.fields.boxes import kept, outside_rows
from prep.kinds.importers.coco_json import Categories, image_order, keypoints_of, upright_hw
from prep.kinds.importers.config import CocoConfig
from prep.kinds.importers.paths import Tree
from prep.run.inputs import reject_record
from prep.sources.samples import Item


@dataclass
class Images:
    """The inputs of a COCO file: in image id order, the rejects, and how many were skipped."""

    items: list[Item] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # images without annotations, left out by --skip-empty


def coco_images(data: dict[str, Any], categories: Categories, cfg: CocoConfig) -> Images:
    """The images of `data` (read_coco's), their files relative to cfg.images."""
    tree = Tree(Path(str(cfg.images)).absolute(), cfg.allow_outside)
    by_image: dict[Any, list[Any]] = defaultdict(list)
    for a in data["annotations"]:
        by_image[_id(a.get("image_id") if isinstance(a, dict) else None)].append(a)
    parsed: list[tuple[str, _Parsed | _Refused]] = []
    for n, im in sorted(enumerate(data["images"]), key=lambda e: image_order(*e)):
        if not isinstance(im, dict):
            parsed.append((f"#{n}", _Refused("bad_annotation", "an image entry is not an object")))
            continue
        name = str(im.get("file_name", f"images[{n}]"))
        try:
            anns = by_image.get(_id(im.get("id")), [])
            parsed.append((name, _parse(im, anns, categories, cfg, tree)))
        except _Refused as r:
            parsed.append((name, r))
    checks = _check([p for _, p in parsed if isinstance(p, _Parsed)], cfg)
    out = Images()
    for name, p in parsed:
        if isinstance(p, _Parsed):
            p = _value(p, *checks[id(p)], cfg)
        if isinstance(p, _Refused):
            out.rejects.append(reject_record(name, p.code, p.message))
        elif p is None:
            out.skipped += 1
        else:
            out.items.append(Item(name, p))
    return out


def _id(value: Any) -> Any:
    """An image id as a key: a list or object (which no dict key can be) is None."""
    return value if isinstance(value, (int, float, str)) else None


def _parse(
    im: dict[str, Any], anns: list[Any], categories: Categories, cfg: CocoConfig, tree: Tree
) -> _Parsed:
    try:
        hw = (int(im["height"]), int(im["width"]))
        name, image_id = str(im["file_name"]), int(im["id"])
        xywh = np.array([a["bbox"] for a in anns], np.float64).reshape(-1, 4)
        cats = [int(a["category_id"]) for a in anns]
        crowd = np.array([int(a.get("iscrowd", 0)) for a in anns], np.uint8)
        area = np.array([float(a.get("area", 0.0)) for a in anns], np.float32)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise _Refused("bad_annotation", f"an entry without its {e} (or not numbers)") from e
    why = tree.why(name)
    if why is not None:
        raise _Refused("outside", f"file_name {why}")
    if min(hw) < 1:
        raise _Refused("bad_annotation", f"width x height {hw[1]}x{hw[0]} is not an image")
    if hw[0] * hw[1] > cfg.max_pixels:  # before any mask is drawn at that size
        raise _Refused(
            "too_large",
            f"width x height {hw[1]}x{hw[0]} is more pixels than --max-pixels {cfg.max_pixels}",
        )
    label = categories.label
    unknown = [c for c in cats if c not in label]
    if unknown:
        raise _Refused("unknown_category", f"category_id {unknown[0]} is not in categories")
    boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
    labels = np.array([label[c] for c in cats], np.int64)
    points = None
    if cfg.keypoints:
        try:
            points = keypoints_of(anns, categories.joints)
        except (TypeError, ValueError) as e:
            raise _Refused("bad_annotation", f"keypoints: {e}") from e
    path = str(tree.root / name)
    return _Parsed(path, hw, image_id, anns, boxes, labels, crowd, area, points)


def _check(parsed: list[_Parsed], cfg: CocoConfig) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each image's (boxes outside it, boxes kept), by id(): one numpy pass a frame size."""
    frames: dict[tuple[int, int], list[_Parsed]] = defaultdict(list)
    for p in parsed:
        frames[p.hw].append(p)
    out = {}
    for hw, group in frames.items():
        boxes = np.concatenate([p.boxes for p in group])
        bad = outside_rows(boxes, hw)
        keep = kept(boxes, hw, cfg.sizes, cfg.mode)
        cuts = np.cumsum([len(p.boxes) for p in group])[:-1]
        for p, b, k in zip(group, np.split(bad, cuts), np.split(keep, cuts), strict=True):
            out[id(p)] = b, k
    return out


def _value(p: _Parsed, bad: np.ndarray, keep: np.ndarray, cfg: CocoConfig) -> Any:
    """An image's input value, a _Refused, or None: skipped (empty, --skip-empty)."""
    if bad.any():
        return _outside(p, p.anns[int(np.flatnonzero(bad)[0])])
    if cfg.skip_empty and not len(p.anns):
        return None
    value = {
        "path": p.path,
        "hw": p.hw,
        "boxes": p.boxes[keep].astype(np.float32),
        "labels": p.labels[keep],
        "iscrowd": p.crowd[keep],
        "area": p.area[keep],
        "image_id": p.image_id,
        "dropped": int((~keep).sum()),
    }
    if p.points is not None:
        value["keypoints"] = p.points[keep]
    asked = (("mask", cfg.masks), ("instances", cfg.instances), ("polygons", cfg.polygons))
    drawn = [f for f, on in asked if on]
    if drawn:  # the kept instances' only: the masks match the boxes
        value["segmentation"] = [p.anns[j].get("segmentation", []) for j in np.flatnonzero(keep)]
        value["drawn"] = drawn
    return value


def _outside(p: _Parsed, a: dict[str, Any]) -> _Refused:
    """A box outside the JSON's frame: `box_frame` when that frame is not the image's upright
    size (an EXIF-rotated photo given its stored size), else `box_outside`."""
    upright = upright_hw(Path(p.path))
    if upright is not None and upright != p.hw:
        return _Refused(
            "box_frame",
            f"width x height {p.hw[1]}x{p.hw[0]} is not the image's upright size, "
            f"{upright[1]}x{upright[0]} (EXIF orientation applied): annotation {a.get('id')}'s "
            f"bbox {a['bbox']} falls outside it. HINT: fix width and height in the JSON",
        )
    return _Refused(
        "box_outside",
        f"annotation {a.get('id')}: bbox {a['bbox']} is not inside the {p.hw[1]}x{p.hw[0]} image",
    )


@dataclass
class _Parsed:
    """An image entry and its annotations, read (boxes as x0 y0 x1 y1), not yet checked."""

    path: str
    hw: tuple[int, int]
    image_id: int
    anns: list[Any]
    boxes: np.ndarray
    labels: np.ndarray
    crowd: np.ndarray
    area: np.ndarray
    points: np.ndarray | None  # (N, K, 3) with --keypoints


class _Refused(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message
