"""A COCO instances JSON read and checked in the parent, for `prep import coco`: the categories in
label order (sorted by id), then each image (by id) an input carrying its checked annotations
(boxes as x0 y0 x1 y1, labels, iscrowd, area, keypoints, segmentations), or a reject. No image
is opened but those whose boxes lie outside the JSON's frame.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from prep.fields.image import kept, outside_rows
from prep.kinds.importers.config import CocoConfig, Tree
from prep.run.errors import PrepError
from prep.run.inputs import Reject as InputReject  # (code, message): a listed input
from prep.run.inputs import load_json, reject_record
from prep.run.samples import Item


@dataclass
class Categories:
    described: list[dict[str, Any]]  # in label order (by id): id, name, label, keypoints...

    @cached_property
    def label(self) -> dict[int, int]:
        return {d["id"]: d["label"] for d in self.described}

    @property
    def joints(self) -> int:
        """The most keypoints a category names (COCO's person: 17); 0 when none does."""
        return max((len(d.get("keypoints", ())) for d in self.described), default=0)


def read_coco(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PrepError(f"{path}: cannot read it ({e.strerror})") from e
    return parse_coco(data, str(path))


def parse_coco(data: bytes, where: str) -> dict[str, Any]:
    """The instances JSON in `data` (the bytes of `where`), its three lists checked."""
    found = load_json(data, where)
    lists = ("images", "annotations", "categories")
    if not isinstance(found, dict) or not all(isinstance(found.get(k), list) for k in lists):
        raise PrepError(
            f"{where}: not a COCO instances file. HINT: it needs the lists {', '.join(lists)}"
        )
    return found


def categories_of(data: dict[str, Any], path: Path | str) -> Categories:
    try:
        found = sorted((int(c["id"]), str(c["name"]), c) for c in data["categories"])
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise PrepError(f"{path}: a category without an integer id and a name ({e})") from e
    ids = [c for c, _, _ in found]
    if not ids or len(set(ids)) != len(ids):
        raise PrepError(f"{path}: categories are empty or repeat an id")
    described = []
    for label, (i, name, c) in enumerate(found):
        if not isinstance(c.get("keypoints", []), list):
            raise PrepError(f"{path}: category {i}'s keypoints are not a list of names")
        d = {"id": i, "name": name, "label": label}
        d |= {k: c[k] for k in ("supercategory", "keypoints", "skeleton") if k in c}
        described.append(d)
    return Categories(described)


def upright_hw(path: Path) -> tuple[int, int] | None:
    """The (h, w) of the image at `path` upright (EXIF applied), None when unreadable."""
    try:
        with Image.open(path) as im:
            w, h = im.size
            turned = im.getexif().get(0x0112, 1) in (5, 6, 7, 8)  # a quarter turn
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, struct.error):
        return None  # what Pillow raises on a malformed file (see prep.media.image.decode)
    return (w, h) if turned else (h, w)


def coco_images(
    data: dict[str, Any], categories: Categories, cfg: CocoConfig
) -> tuple[list[Item], list[dict[str, Any]], int]:
    """The inputs of `data` (read_coco's) in image id order, their files relative to
    cfg.images, the rejects, and how many images --skip-empty left out."""
    tree = Tree(Path(str(cfg.images)).absolute(), cfg.allow_outside)
    by_image: dict[Any, list[Any]] = defaultdict(list)
    for a in data["annotations"]:
        by_image[_id(a.get("image_id") if isinstance(a, dict) else None)].append(a)
    parsed: list[tuple[str, _Parsed | InputReject]] = []
    for n, im in sorted(enumerate(data["images"]), key=_image_order):
        if not isinstance(im, dict):
            parsed.append(
                (f"#{n}", InputReject("bad_annotation", "an image entry is not an object"))
            )
            continue
        name = str(im.get("file_name", f"images[{n}]"))
        try:
            anns = by_image.get(_id(im.get("id")), [])
            parsed.append((name, _parse(im, anns, categories, cfg, tree)))
        except InputReject as r:
            parsed.append((name, r))
    checks = _check([p for _, p in parsed if isinstance(p, _Parsed)], cfg)
    items, rejects, skipped = [], [], 0
    for name, p in parsed:
        if isinstance(p, _Parsed):
            p = _value(p, *checks[id(p)], cfg)
        if isinstance(p, InputReject):
            rejects.append(reject_record(name, p.code, p.message))
        elif p is None:
            skipped += 1
        else:
            items.append(Item(name, p))
    return items, rejects, skipped


def _image_order(entry: tuple[int, Any]) -> tuple[int, str, int]:
    """By image id, numbers first: reordering the JSON changes nothing."""
    n, im = entry
    i = im.get("id") if isinstance(im, dict) else None
    return (0, f"{i:020d}", n) if isinstance(i, int) and i >= 0 else (1, str(i), n)


def _id(value: Any) -> Any:
    """An image id as a key (a list or object is None)."""
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
        raise InputReject("bad_annotation", f"an entry without its {e} (or not numbers)") from e
    why = tree.why(name)
    if why is not None:
        raise InputReject("outside", f"file_name {why}")
    if min(hw) < 1:
        raise InputReject("bad_annotation", f"width x height {hw[1]}x{hw[0]} is not an image")
    if hw[0] * hw[1] > cfg.max_pixels:  # before any mask is drawn at that size
        raise InputReject(
            "too_large",
            f"width x height {hw[1]}x{hw[0]} is more pixels than --max-pixels {cfg.max_pixels}",
        )
    label = categories.label
    unknown = [c for c in cats if c not in label]
    if unknown:
        raise InputReject("unknown_category", f"category_id {unknown[0]} is not in categories")
    boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
    labels = np.array([label[c] for c in cats], np.int64)
    points = None
    if cfg.keypoints:  # float32 (N, joints, 3) of each flat `keypoints` (x, y, v), zeros where none
        joints = categories.joints
        points = np.zeros((len(anns), joints, 3), np.float32)
        for i, a in enumerate(anns):
            try:
                flat = np.asarray(a.get("keypoints") or [], np.float32).reshape(-1, 3)
            except (TypeError, ValueError) as e:
                raise InputReject("bad_annotation", f"keypoints: {e}") from e
            if len(flat) > joints:
                why = f"keypoints: annotation {a.get('id')} has {len(flat)} keypoints, not {joints}"
                raise InputReject("bad_annotation", why)
            points[i, : len(flat)] = flat
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
    """An image's input value, an InputReject, or None: skipped (empty, --skip-empty)."""
    if bad.any():  # box_frame when the JSON's frame is not the image's upright size
        a = p.anns[int(np.flatnonzero(bad)[0])]
        upright = upright_hw(Path(p.path))
        if upright is not None and upright != p.hw:
            return InputReject(
                "box_frame",
                f"width x height {p.hw[1]}x{p.hw[0]} is not the image's upright size, "
                f"{upright[1]}x{upright[0]} (EXIF orientation applied): annotation {a.get('id')}'s "
                f"bbox {a['bbox']} falls outside it. HINT: fix width and height in the JSON",
            )
        return InputReject(
            "box_outside",
            f"annotation {a.get('id')}: bbox {a['bbox']} is not inside the "
            f"{p.hw[1]}x{p.hw[0]} image",
        )
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
