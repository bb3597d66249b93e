"""`prep import coco`: a COCO instances JSON and its images as samples: image, boxes (in the
stored image's pixels, by the image's own geometry: prep.kinds.samples.boxes), labels
(contiguous ids), iscrowd, area and image_id.

The JSON is read once, in the parent: each image becomes one input carrying its annotations,
so the workers open no JSON. An annotation that cannot be used rejects its image, with one
line: an unknown category, a box outside its image, a malformed entry.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import Manifest
from prep.errors import PrepError, Reject, UsageError
from prep.importers.coco_json import (
    Categories,
    categories_of,
    file_stat,
    found_images,
    image_order,
    keypoints_of,
    read_coco,
    rejected_in,
)
from prep.importers.config import CocoConfig, image_field
from prep.kinds.samples.boxes import kept, outside_rows
from prep.kinds.samples.inputs import Item, Listing
from prep.kinds.samples.pack import SamplesKind
from prep.run.driver import Inputs, RunSummary, run
from prep.run.inputs import reject_record as reject


@dataclass
class CocoSummary(RunSummary):
    boxes: int = 0  # boxes stored
    dropped: int = 0  # boxes left with no area by the crop (or with none to start with)
    skipped: int = 0  # images without annotations, left out by --skip-empty

    def line(self) -> str:
        more = f", {self.skipped} empty images skipped" if self.skipped else ""
        return (
            f"{super().line()}; {self.boxes} boxes, {self.dropped} dropped (no area in the "
            f"stored image){more}"
        )


def fields_of(cfg: CocoConfig, categories: Categories) -> dict[str, Any]:
    from prep.fields import Array, Boxes, Instances, Keypoints, Mask, Scalar

    image = image_field(cfg)
    fields: dict[str, Any] = {
        "image": image,
        "boxes": Boxes(image="image"),
        "labels": Array("int64", (None,)),
        "iscrowd": Array("uint8", (None,)),
        "area": Array("float32", (None,)),
        "image_id": Scalar("int64"),
    }
    if cfg.masks:
        if len(categories.ids) > 255:
            raise UsageError(
                f"--masks: {cfg.src} has {len(categories.ids)} categories; a class-id mask "
                "holds 255 (label + 1, 0 for background). HINT: use --instances"
            )
        fields["mask"] = Mask(image="image")
    if cfg.instances:
        fields["instances"] = Instances(image="image")
    if cfg.keypoints:
        if not categories.joints:
            raise UsageError(f"--keypoints: no category of {cfg.src} names its keypoints")
        fields["keypoints"] = Keypoints(image="image", joints=categories.joints)
    return fields


def make_sample(value: dict[str, Any]) -> dict[str, Any]:
    """One listed image -> its sample (the boxes with the (h, w) they were drawn on, which the
    Boxes field checks against the decoded image); with --masks, its class-id mask; with
    --instances, its instances' masks."""
    sample = {
        "image": value["path"],
        "boxes": {"xyxy": value["boxes"], "hw": value["hw"]},
        "labels": value["labels"],
        "iscrowd": value["iscrowd"],
        "area": value["area"],
        "image_id": value["image_id"],
    }
    if "keypoints" in value:
        sample["keypoints"] = value["keypoints"]
    if "segmentation" in value:
        from prep.importers.coco_masks import rasterise, semantic

        segs, hw = value["segmentation"], value["hw"]
        try:
            if "mask" in value["drawn"]:
                sample["mask"] = semantic(segs, value["labels"], hw)
            if "instances" in value["drawn"]:
                masks = [rasterise(seg, hw) for seg in segs]
                sample["instances"] = np.stack(masks) if masks else np.zeros((0, *hw), np.uint8)
        except (ValueError, TypeError, KeyError) as e:
            raise Reject(f"a segmentation that cannot be drawn: {e}", "bad_segmentation") from e
    return sample


class CocoKind(SamplesKind):
    """The samples kind over a COCO file's images (sorted by image id)."""

    summary = CocoSummary

    def __init__(self, cfg: CocoConfig):
        cfg.validate()  # before reading SRC: a missing SRC is a usage error
        path = Path(str(cfg.src))
        self.data: dict[str, Any] | None = read_coco(path)  # once: the fields need its keypoints
        self.categories = categories_of(self.data, path)
        fields = fields_of(cfg, self.categories)
        super().__init__(cfg, make_sample, fields, cfg.src)  # type: ignore[arg-type]
        self.coco = cfg
        self.boxes = self.dropped = self.skipped = 0
        self.manifested = False  # the manifest made by this run (not a finished OUT's, resumed)
        self.counts: list[tuple[str, int, int]] = []  # each image's boxes stored and dropped

    def sources(self) -> list[Path]:
        return [Path(str(self.coco.src)), Path(str(self.coco.images))]

    def list_inputs(self) -> Inputs:
        path = Path(str(self.coco.src))
        data, self.data = self.data or read_coco(path), None  # not kept through the run
        items, rejects = self._items(data, Path(str(self.coco.images)).absolute())
        items, missing, stats = found_images(items[: self.coco.limit], "IMAGES", self.coco.images)
        rejects += missing
        self.counts = [(it.rel, len(it.value["labels"]), it.value["dropped"]) for it in items]
        self.boxes, self.dropped = self._counted(set())
        # What the output depends on besides the config: the JSON and every image file (as
        # prep pack's listing has it: a changed image is not resumed as the same).
        said = [file_stat(path), self.described(), *stats]
        digest = hashlib.sha256(json.dumps(said).encode()).hexdigest()
        self.listing = Listing(items, rejects, None, digest)
        if not items:
            first = f"; the first, {rejects[0]['path']}: {rejects[0]['message']}" if rejects else ""
            raise PrepError(f"no images to import in {path} ({len(rejects)} rejected{first})")
        return Inputs(len(items), rejects, digest)

    def _items(self, data: dict[str, Any], root: Path) -> tuple[list[Item], list[dict[str, Any]]]:
        """The images in id order, each parsed, its boxes checked (a frame size at a time:
        numpy over every box of the images of that size), then made an input or a reject."""
        by_image: dict[Any, list[Any]] = defaultdict(list)
        for a in data["annotations"]:
            by_image[a.get("image_id") if isinstance(a, dict) else None].append(a)
        parsed: list[tuple[str, _Parsed | _Refused]] = []
        for n, im in sorted(enumerate(data["images"]), key=lambda e: image_order(*e)):
            name = str(im.get("file_name", f"images[{n}]")) if isinstance(im, dict) else f"#{n}"
            try:
                parsed.append((name, self._parse(im, by_image.get(im.get("id"), []), root)))
            except _Refused as r:
                parsed.append((name, r))
            except AttributeError:  # not a dict
                parsed.append((name, _Refused("bad_annotation", "an image entry is not an object")))
        checks = self._check([p for _, p in parsed if isinstance(p, _Parsed)])
        items, rejects = [], []
        for name, p in parsed:
            if isinstance(p, _Parsed):
                p = self._value(p, *checks[id(p)])
            if isinstance(p, _Refused):
                rejects.append(reject(name, p.code, p.message))
            elif p is None:
                self.skipped += 1
            else:
                items.append(Item(name, p))
        return items, rejects

    def _parse(self, im: Any, anns: list[Any], root: Path) -> _Parsed:
        try:
            hw = (int(im["height"]), int(im["width"]))
            path, image_id = root / str(im["file_name"]), int(im["id"])
            xywh = np.array([a["bbox"] for a in anns], np.float64).reshape(-1, 4)
            cats = [int(a["category_id"]) for a in anns]
            crowd = np.array([int(a.get("iscrowd", 0)) for a in anns], np.uint8)
            area = np.array([float(a.get("area", 0.0)) for a in anns], np.float32)
        except (KeyError, TypeError, ValueError) as e:
            raise _Refused("bad_annotation", f"an entry without its {e} (or not numbers)") from e
        label = self.categories.label
        unknown = [c for c in cats if c not in label]
        if unknown:
            raise _Refused("unknown_category", f"category_id {unknown[0]} is not in categories")
        boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
        labels = np.array([label[c] for c in cats], np.int64)
        points = None
        if self.coco.keypoints:
            try:
                points = keypoints_of(anns, self.categories.joints)
            except (TypeError, ValueError) as e:
                raise _Refused("bad_annotation", f"keypoints: {e}") from e
        return _Parsed(str(path), hw, image_id, anns, boxes, labels, crowd, area, points)

    def _check(self, parsed: list[_Parsed]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Each image's (boxes outside it, boxes kept), by id(): one numpy pass a frame size."""
        frames: dict[tuple[int, int], list[_Parsed]] = defaultdict(list)
        for p in parsed:
            frames[p.hw].append(p)
        out = {}
        for hw, group in frames.items():
            boxes = np.concatenate([p.boxes for p in group])
            bad = outside_rows(boxes, hw)
            keep = kept(boxes, hw, self.coco.sizes, self.coco.mode)
            cuts = np.cumsum([len(p.boxes) for p in group])[:-1]
            for p, b, k in zip(group, np.split(bad, cuts), np.split(keep, cuts), strict=True):
                out[id(p)] = b, k
        return out

    def _value(self, p: _Parsed, bad: np.ndarray, keep: np.ndarray) -> Any:
        """An image's input value, a _Refused, or None: skipped (empty, --skip-empty)."""
        if bad.any():
            a = p.anns[int(np.flatnonzero(bad)[0])]
            return _Refused(
                "box_outside",
                f"annotation {a.get('id')}: bbox {a['bbox']} is not inside the "
                f"{p.hw[1]}x{p.hw[0]} image",
            )
        if self.coco.skip_empty and not len(p.anns):
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
        wanted = (("mask", self.coco.masks), ("instances", self.coco.instances))
        drawn = [field for field, on in wanted if on]
        if drawn:  # the kept instances' only: the masks match the boxes
            value["segmentation"] = [
                p.anns[j].get("segmentation", []) for j in np.flatnonzero(keep)
            ]
            value["drawn"] = drawn
        return value

    def _counted(self, rejected: set[str]) -> tuple[int, int]:
        """Boxes stored and dropped, over the images not rejected by the workers."""
        kept = [(b, d) for rel, b, d in self.counts if rel not in rejected]
        return sum(b for b, _ in kept), sum(d for _, d in kept)

    def manifest(self, records: list[dict[str, Any]]) -> Manifest:
        out = super().manifest(records)
        self.boxes, self.dropped = self._counted(
            {r["path"] for rec in records for r in rec.get("rejects", ())}
        )
        self.manifested = True
        cats = self.categories
        out.classes = list(cats.names)
        out.extra["coco"] = {
            "annotations": Path(str(self.coco.src)).name,
            "categories": cats.described,
        }
        return out


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


def import_coco(cfg: CocoConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    kind = CocoKind(cfg)
    summary = run(kind, show_progress, profile)
    if isinstance(summary, CocoSummary):
        if not kind.manifested:  # OUT was finished already: its rejects.jsonl says which
            kind.boxes, kind.dropped = kind._counted(rejected_in(summary.out))
        summary.boxes, summary.dropped, summary.skipped = kind.boxes, kind.dropped, kind.skipped
    return summary
