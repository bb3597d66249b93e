"""Reading a COCO instances file: the JSON with its three lists, the categories in label order
(sorted by id), the order of its images (by id), keypoints, and the image files found."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from prep.run.errors import PrepError
from prep.run.inputs import check_file, load_json
from prep.sources.samples import Item


@dataclass
class Categories:
    ids: list[int]  # COCO's category ids, in label order (sorted)
    names: list[str]
    described: list[dict[str, Any]]  # for the manifest: id, name, label, keypoints, skeleton

    @cached_property
    def label(self) -> dict[int, int]:
        return {c: i for i, c in enumerate(self.ids)}

    @property
    def joints(self) -> int:
        """The most keypoints a category names (COCO's person: 17); 0 when none does."""
        return max((len(d.get("keypoints", ())) for d in self.described), default=0)


def read_coco(path: Path) -> dict[str, Any]:
    """The instances JSON, with its three lists checked to be there."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PrepError(f"{path}: cannot read it ({e.strerror})") from e
    return parse_coco(data, str(path))


def parse_coco(data: bytes, where: str) -> dict[str, Any]:
    """The instances JSON in `data` (the bytes of `where`), its three lists checked to be
    there; PrepError (one line naming `where`) for anything else."""
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
    return Categories(ids, [n for _, n, _ in found], described)


def keypoints_of(anns: list[Any], joints: int) -> np.ndarray:
    """float32 (N, joints, 3) of the annotations' `keypoints` (x, y, v flat); none or fewer:
    zeros (not labelled). ValueError for a list that is not whole points or too long."""
    out = np.zeros((len(anns), joints, 3), np.float32)
    for i, a in enumerate(anns):
        flat = np.asarray(a.get("keypoints") or [], np.float32).reshape(-1, 3)
        if len(flat) > joints:
            raise ValueError(f"annotation {a.get('id')} has {len(flat)} keypoints, not {joints}")
        out[i, : len(flat)] = flat
    return out


def image_order(n: int, im: Any) -> tuple[int, str, int]:
    """By image id (numbers first), as COCO's ids are unique: what reordering the JSON's list
    does not change."""
    i = im.get("id") if isinstance(im, dict) else None
    return (0, f"{i:020d}", n) if isinstance(i, int) and i >= 0 else (1, str(i), n)


def upright_hw(path: Path) -> tuple[int, int] | None:
    """The (h, w) the image at `path` shows upright (EXIF orientation applied), from its header
    alone; None when it cannot be read (its own reject comes when it is decoded)."""
    import struct

    from PIL import Image

    try:
        with Image.open(path) as im:
            w, h = im.size
            turned = im.getexif().get(0x0112, 1) in (5, 6, 7, 8)  # a quarter turn
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, struct.error):
        return None  # what Pillow raises on a malformed file (see prep.media.image.decode)
    return (w, h) if turned else (h, w)


def file_stat(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path), st.st_size, st.st_mtime_ns


def rejected_in(out: Path) -> set[str]:
    """The inputs a finished dataset's rejects.jsonl names."""
    try:
        lines = (Path(out) / "rejects.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return set()
    return {json.loads(line)["path"] for line in lines if line.strip()}


def found_images(
    items: list[Item], option: str, folder: Any
) -> tuple[list[Item], list[dict[str, Any]], list[tuple[str, int, int]]]:
    """The items whose image file (`value["path"]`) is there, with each file's (path, size,
    time): a changed image is not resumed as the same. A reject for each other one, its message
    naming the path looked at and the fix."""
    kept, rejects, stats = [], [], []
    for it in items:
        path = Path(it.value["path"])
        bad = check_file(path, it.rel)
        if bad is None:
            kept.append(it)
            stats.append(file_stat(path))
            continue
        said = bad["message"]
        hint = f". HINT: file_name is relative to {option} ({folder})"
        bad["message"] = f"image {path}: {said}{'' if 'HINT' in said else hint}"
        rejects.append(bad)
    return kept, rejects, stats
