"""`prep import coco`: a COCO instances JSON and its images as samples (image, boxes, labels,
iscrowd, area, image_id, source). The JSON is read once, in the parent: the categories in label
order (sorted by id), then each image (by id) an input carrying its checked annotations, so the
workers open no JSON. No image is opened but those whose boxes lie outside the JSON's frame.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from loaders.format.arrays import iter_rejects
from prep.fields import Array, Boxes, Instances, Keypoints, Labels, Mask, Polygons, Scalar
from prep.fields.image import kept, outside_rows
from prep.fields.rle import rasterise, semantic
from prep.kinds.importers.config import CocoConfig, Tree, image_field
from prep.run.classmaps import Renamed
from prep.run.driver import run
from prep.run.errors import PrepError, Reject, UsageError
from prep.run.grow import Parent, adopt_early, file_identity
from prep.run.inputs import Reject as InputReject  # (code, message): a listed input
from prep.run.inputs import check_file, load_json, reject_record
from prep.run.kind import Inputs, fingerprint
from prep.run.samples import Item, SamplesRun, UserFunction
from prep.run.summary import RunSummary
from prep.sources.samples import file_stats


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
