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
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import Manifest
from prep.errors import PrepError, Reject, UsageError
from prep.importers.config import CocoConfig
from prep.kinds.samples.boxes import kept, outside
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


@dataclass
class Categories:
    ids: list[int]  # COCO's category ids, in label order (sorted)
    names: list[str]

    @cached_property
    def label(self) -> dict[int, int]:
        return {c: i for i, c in enumerate(self.ids)}


def fields_of(cfg: CocoConfig) -> dict[str, Any]:
    from prep.fields import Array, Boxes, Image, Instances, Mask, Scalar

    image = Image(
        sizes=tuple(cfg.sizes),
        mode=cfg.mode,
        codec=cfg.codec,
        gray=cfg.gray,
        quality=cfg.quality,
        pad_value=cfg.pad_value,
        max_pixels=cfg.max_pixels,
    )
    fields: dict[str, Any] = {
        "image": image,
        "boxes": Boxes(image="image"),
        "labels": Array("int64", (None,)),
        "iscrowd": Array("uint8", (None,)),
        "area": Array("float32", (None,)),
        "image_id": Scalar("int64"),
    }
    if cfg.masks:
        fields["mask"] = Mask(image="image")
    if cfg.instances:
        fields["instances"] = Instances(image="image")
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


def read_coco(path: Path) -> dict[str, Any]:
    """The instances JSON, with its three lists checked to be there."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PrepError(f"{path}: cannot read it as JSON ({e})") from e
    lists = ("images", "annotations", "categories")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in lists):
        raise PrepError(
            f"{path}: not a COCO instances file. HINT: it needs the lists {', '.join(lists)}"
        )
    return data


def categories_of(data: dict[str, Any], path: Path) -> Categories:
    try:
        found = sorted((int(c["id"]), str(c["name"])) for c in data["categories"])
    except (KeyError, TypeError, ValueError) as e:
        raise PrepError(f"{path}: a category without an integer id and a name ({e})") from e
    ids = [c for c, _ in found]
    if not ids or len(set(ids)) != len(ids):
        raise PrepError(f"{path}: categories are empty or repeat an id")
    return Categories(ids, [n for _, n in found])


class CocoKind(SamplesKind):
    """The samples kind over a COCO file's images (sorted by image id)."""

    summary = CocoSummary

    def __init__(self, cfg: CocoConfig):
        super().__init__(cfg, make_sample, fields_of(cfg), cfg.src)  # type: ignore[arg-type]
        self.coco = cfg
        self.boxes = self.dropped = self.skipped = 0

    def sources(self) -> list[Path]:
        return [Path(str(self.coco.src)), Path(str(self.coco.images))]

    def list_inputs(self) -> Inputs:
        path = Path(str(self.coco.src))
        data = read_coco(path)
        self.categories = categories_of(data, path)
        if self.coco.masks and len(self.categories.ids) > 255:
            raise UsageError(
                f"--masks: {path} has {len(self.categories.ids)} categories; a class-id mask "
                "holds 255 (label + 1, 0 for background)"
            )
        items, rejects = self._items(data, Path(str(self.coco.images)).absolute())
        items = items[: self.coco.limit]
        self.boxes = sum(len(it.value["labels"]) for it in items)
        st = path.stat()
        said = [path.name, st.st_size, st.st_mtime_ns, str(self.coco.images), self.described()]
        digest = hashlib.sha256(json.dumps(said).encode()).hexdigest()
        self.listing = Listing(items, rejects, None, digest)
        if not items:
            raise PrepError(f"no images to import in {path} ({len(rejects)} rejected)")
        return Inputs(len(items), rejects, digest)

    def _items(self, data: dict[str, Any], root: Path) -> tuple[list[Item], list[dict[str, Any]]]:
        by_image: dict[Any, list[Any]] = defaultdict(list)
        for a in data["annotations"]:
            by_image[a.get("image_id") if isinstance(a, dict) else None].append(a)
        items, rejects = [], []
        for n, im in sorted(enumerate(data["images"]), key=lambda e: _image_order(*e)):
            name = str(im.get("file_name", f"images[{n}]")) if isinstance(im, dict) else f"#{n}"
            try:
                value = self._image(im, by_image.get(im.get("id"), []), root)
            except _Refused as r:
                rejects.append(reject(name, r.code, r.message))
                continue
            except AttributeError:  # not a dict
                rejects.append(reject(name, "bad_annotation", "an image entry is not an object"))
                continue
            if value is None:
                self.skipped += 1
                continue
            items.append(Item(name, value))
        return items, rejects

    def _image(self, im: Any, anns: list[Any], root: Path) -> dict[str, Any] | None:
        """An image's input value; None: skipped (empty, --skip-empty)."""
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
        bad = outside(boxes, hw)
        if bad is not None:
            raise _Refused(
                "box_outside",
                f"annotation {anns[bad].get('id')}: bbox {anns[bad]['bbox']} is not inside "
                f"the {hw[1]}x{hw[0]} image",
            )
        keep = kept(boxes, hw, self.coco.sizes, self.coco.mode)
        self.dropped += int((~keep).sum())
        if self.coco.skip_empty and not len(anns):
            return None
        labels = np.array([label[c] for c in cats], np.int64)[keep]
        value = {
            "path": str(path),
            "hw": hw,
            "boxes": boxes[keep].astype(np.float32),
            "labels": labels,
            "iscrowd": crowd[keep],
            "area": area[keep],
            "image_id": image_id,
        }
        drawn = [
            k for k, on in (("mask", self.coco.masks), ("instances", self.coco.instances)) if on
        ]
        if drawn:  # the kept instances' only: the masks match the boxes
            value["segmentation"] = [anns[j].get("segmentation", []) for j in np.flatnonzero(keep)]
            value["drawn"] = drawn
        return value

    def manifest(self, records: list[dict[str, Any]]) -> Manifest:
        out = super().manifest(records)
        cats = self.categories
        out.classes = list(cats.names)
        out.extra["coco"] = {
            "annotations": Path(str(self.coco.src)).name,
            "categories": [
                {"id": c, "name": n, "label": i}
                for i, (c, n) in enumerate(zip(cats.ids, cats.names, strict=True))
            ],
        }
        return out


class _Refused(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _image_order(n: int, im: Any) -> tuple[int, str, int]:
    """By image id (numbers first), as COCO's ids are unique: what reordering the JSON's list
    does not change."""
    i = im.get("id") if isinstance(im, dict) else None
    return (0, f"{i:020d}", n) if isinstance(i, int) and i >= 0 else (1, str(i), n)


def import_coco(cfg: CocoConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    kind = CocoKind(cfg)
    summary = run(kind, show_progress, profile)
    if isinstance(summary, CocoSummary):
        summary.boxes, summary.dropped, summary.skipped = kind.boxes, kind.dropped, kind.skipped
    return summary
