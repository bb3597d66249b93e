"""`prep import coco`: a COCO instances JSON and its images as samples (image, boxes, labels,
iscrowd, area, image_id, source): the run, its fields and summary, and the worker's sample (masks
drawn there). The JSON is read once, in the parent (prep.kinds.importers.cocojson), so the
workers open no JSON.
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
from prep.kinds.importers.cocojson import (
    Categories,
    categories_of,
    coco_images,
    read_coco,
    upright_hw,
)
from prep.kinds.importers.config import CocoConfig, image_field
from prep.run.classmaps import Renamed
from prep.run.driver import run
from prep.run.errors import PrepError, Reject, UsageError
from prep.run.grow import Parent, adopt_early, file_identity
from prep.run.inputs import check_file
from prep.run.kind import Inputs, fingerprint
from prep.run.samples import SamplesRun, UserFunction
from prep.run.summary import RunSummary
from prep.sources.samples import file_stats


@dataclass
class CocoSummary(RunSummary):
    boxes: int = 0  # boxes stored
    dropped: int = 0  # boxes left with no area by the crop (or with none to start with)
    empty: int = 0  # images without annotations, left out by --skip-empty

    def line(self) -> str:
        more = f", {self.empty} empty images skipped" if self.empty else ""
        return (
            f"{super().line()}; {self.boxes} boxes, {self.dropped} dropped (no area in the "
            f"stored image){more}"
        )


def fields_of(cfg: CocoConfig, categories: Categories) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "image": image_field(cfg),
        "boxes": Boxes(image="image"),
        "labels": Labels(classes=tuple(d["name"] for d in categories.described)),
        "iscrowd": Array("uint8", (None,)),
        "area": Array("float32", (None,)),
        "image_id": Scalar("int64"),
    }
    if cfg.masks and len(categories.described) > 255:
        raise UsageError(
            f"--masks: {cfg.src} has {len(categories.described)} categories; a class-id mask "
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
    sample = {"image": value["path"], "boxes": {"xyxy": value["boxes"], "hw": value["hw"]}}
    copied = ("labels", "iscrowd", "area", "image_id", "keypoints")
    sample |= {k: value[k] for k in copied if k in value}  # keypoints: with --keypoints
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
    appendable = True
    grows_classes = True
    summary = CocoSummary
    cfg: CocoConfig

    def __init__(self, cfg: CocoConfig):
        cfg.validate()  # before reading SRC: a missing SRC is a usage error
        adopt_early(cfg)  # the fields below follow the options
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
        listed, rejects, self.skipped = coco_images(data, self.categories, self.cfg)
        hint = f". HINT: file_name is relative to IMAGES ({self.cfg.images})"
        self.items = items = []
        for it in listed[: self.cfg.limit]:  # the images that are there
            bad = check_file(Path(it.value["path"]), it.rel)
            if bad is None:
                items.append(it)
                continue
            told = bad["message"]
            bad["message"] = f"image {it.value['path']}: {told}{'' if 'HINT' in told else hint}"
            rejects.append(bad)
        self.counts = [(it.rel, len(it.value["labels"]), it.value["dropped"]) for it in items]
        # The JSON and every image file: a changed image is not resumed as the same.
        images = [Path(it.value["path"]) for it in items]
        said = [*file_stats([path]), self.described(), *file_stats(images)]
        if not items:
            first = f"; the first, {rejects[0]['path']}: {rejects[0]['message']}" if rejects else ""
            raise PrepError(f"no images to import in {path} ({len(rejects)} rejected{first})")
        return Inputs(len(items), rejects, fingerprint(said))

    def identities(self) -> dict[str, str]:
        """An image's file (size, time) and its annotations, their classes by name: a
        category added to the file moves the ids, not the images' identity."""
        names = [d["name"] for d in self.categories.described]
        out = {}
        for it in self.items:
            said = dict(it.value) | {"labels": [names[i] for i in it.value["labels"]]}
            digest = hashlib.sha256(json.dumps(said, default=_listed, sort_keys=True).encode())
            out[it.rel] = file_identity(it.value["path"], None, None, digest.hexdigest())
        return out

    def grow(self, parent: Parent, fresh: set[str]) -> int:
        kept = super().grow(parent, fresh)
        self.counts = [c for c in self.counts if c[0] in fresh]  # the summary's: this run's
        if self.cfg.masks and isinstance(self.make, Renamed):
            raise PrepError(
                f"cannot append: {self.cfg.src}'s categories are not the dataset's followed by "
                "new ones, and --masks stores class ids in pixels. HINT: list new categories "
                "with higher ids than the old, or write a new dataset"
            )
        return kept

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        said: dict[str, Any] = {"annotations": Path(str(self.cfg.src)).name}
        said["categories"] = self.categories.described
        return super().extra(records) | {"coco": said}


def _listed(value: Any) -> Any:
    return np.asarray(value).tolist()  # an annotation's arrays, as JSON


def import_coco(cfg: CocoConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    kind = CocoKind(cfg)
    summary = run(kind, show_progress, profile)
    if isinstance(summary, CocoSummary):  # boxes of the images no worker rejected
        rejected = {r["path"] for r in iter_rejects(summary.out)}
        kept = [(b, d) for rel, b, d in kind.counts if rel not in rejected]
        summary.boxes, summary.dropped = sum(b for b, _ in kept), sum(d for _, d in kept)
        summary.empty = kind.skipped
    return summary
