"""`prep import coco`: a COCO instances JSON and its images as samples (image, boxes, labels,
iscrowd, area, image_id, source). The JSON is read once, in the parent (coco_items): each image
is an input carrying its annotations, so the workers open no JSON.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format.arrays import iter_rejects
from prep.fields import Array, Boxes, Instances, Keypoints, Labels, Mask, Polygons, Scalar
from prep.fields.rle import rasterise, semantic
from prep.kinds.importers.coco_items import (
    Categories,
    categories_of,
    coco_images,
    read_coco,
    upright_hw,
)
from prep.kinds.importers.config import CocoConfig, image_field
from prep.run.driver import Inputs, RunSummary, run
from prep.run.errors import PrepError, Reject, UsageError
from prep.run.inputs import check_file
from prep.run.samples import Item, SamplesRun, UserFunction
from prep.sources.samples import file_stats


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
    fields: dict[str, Any] = {
        "image": image_field(cfg),
        "boxes": Boxes(image="image"),
        "labels": Labels(classes=tuple(categories.names)),
        "iscrowd": Array("uint8", (None,)),
        "area": Array("float32", (None,)),
        "image_id": Scalar("int64"),
    }
    if cfg.masks and len(categories.ids) > 255:
        raise UsageError(
            f"--masks: {cfg.src} has {len(categories.ids)} categories; a class-id mask "
            "holds 255 (label + 1, 0 for background). HINT: use --instances"
        )
    if cfg.keypoints and not categories.joints:
        raise UsageError(f"--keypoints: no category of {cfg.src} names its keypoints")
    placed = {"mask": (cfg.masks, Mask), "instances": (cfg.instances, Instances)}
    placed["polygons"] = (cfg.polygons, Polygons)
    fields |= {name: kind(image="image") for name, (on, kind) in placed.items() if on}
    if cfg.keypoints:
        fields["keypoints"] = Keypoints(image="image", joints=categories.joints)
    return fields


def make_sample(value: dict[str, Any]) -> dict[str, Any]:
    """One listed image -> its sample: the boxes with the (h, w) they were drawn on."""
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
        segs, hw = value["segmentation"], value["hw"]
        upright = upright_hw(Path(value["path"]))
        if upright is not None and upright != tuple(hw):  # before any mask at the JSON's size
            raise Reject(
                f"boxes drawn on a {hw[1]}x{hw[0]} image (the JSON's width and height); it is "
                f"{upright[1]}x{upright[0]} upright (EXIF orientation applied)",
                "box_frame",
            )
        try:
            if "mask" in value["drawn"]:
                sample["mask"] = semantic(segs, value["labels"], hw)
            if "instances" in value["drawn"]:
                masks = [rasterise(seg, hw) for seg in segs]
                sample["instances"] = np.stack(masks) if masks else np.zeros((0, *hw), np.uint8)
            if "polygons" in value["drawn"]:  # an RLE (a crowd) has no polygon to keep
                sample["polygons"] = [p for seg in segs if isinstance(seg, list) for p in seg]
        except (ValueError, TypeError, KeyError) as e:
            raise Reject(f"a segmentation that cannot be drawn: {e}", "bad_segmentation") from e
    return sample


class CocoKind(SamplesRun):
    """The samples run over a COCO file's images, by image id; `source`: the file_name."""

    name = "import coco"
    sourced = True
    summary = CocoSummary
    cfg: CocoConfig

    def __init__(self, cfg: CocoConfig):
        cfg.validate()  # before reading SRC: a missing SRC is a usage error
        super().__init__(cfg)
        path = Path(str(cfg.src))
        self.data: dict[str, Any] | None = read_coco(path)  # once: the fields need its keypoints
        self.categories = categories_of(self.data, path)
        self.make = UserFunction(make_sample)
        self.declare(fields_of(cfg, self.categories))
        self.skipped = 0
        self.counts: list[tuple[str, int, int]] = []  # each image's boxes stored and dropped

    def sources(self) -> list[Path]:
        return [Path(str(self.cfg.src)), Path(str(self.cfg.images))]

    def list_inputs(self) -> Inputs:
        path = Path(str(self.cfg.src))
        data, self.data = self.data or read_coco(path), None  # not kept through the run
        items, rejects, self.skipped = coco_images(data, self.categories, self.cfg)
        items, missing, stats = _found(items[: self.cfg.limit], self.cfg.images)
        rejects += missing
        self.counts = [(it.rel, len(it.value["labels"]), it.value["dropped"]) for it in items]
        # The JSON and every image file: a changed image is not resumed as the same.
        said = [*file_stats([path]), self.described(), *stats]
        digest = hashlib.sha256(json.dumps(said).encode()).hexdigest()
        self.items = items
        if not items:
            first = f"; the first, {rejects[0]['path']}: {rejects[0]['message']}" if rejects else ""
            raise PrepError(f"no images to import in {path} ({len(rejects)} rejected{first})")
        return Inputs(len(items), rejects, digest)

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        said: dict[str, Any] = {"annotations": Path(str(self.cfg.src)).name}
        said["categories"] = self.categories.described
        return super().extra(records) | {"coco": said}


def _found(
    items: list[Item], folder: Any
) -> tuple[list[Item], list[dict[str, Any]], list[tuple[str, int, int]]]:
    """The items whose image file is there, rejects for the others, and the files' stats."""
    kept, rejects = [], []
    for it in items:
        bad = check_file(Path(it.value["path"]), it.rel)
        if bad is None:
            kept.append(it)
            continue
        said = bad["message"]
        hint = f". HINT: file_name is relative to IMAGES ({folder})"
        bad["message"] = f"image {it.value['path']}: {said}{'' if 'HINT' in said else hint}"
        rejects.append(bad)
    return kept, rejects, file_stats([Path(it.value["path"]) for it in kept])


def import_coco(cfg: CocoConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    kind = CocoKind(cfg)
    summary = run(kind, show_progress, profile)
    if isinstance(summary, CocoSummary):  # boxes of the images no worker rejected
        rejected = {r["path"] for r in iter_rejects(summary.out)}
        kept = [(b, d) for rel, b, d in kind.counts if rel not in rejected]
        summary.boxes, summary.dropped = sum(b for b, _ in kept), sum(d for _, d in kept)
        summary.skipped = kind.skipped
    return summary
