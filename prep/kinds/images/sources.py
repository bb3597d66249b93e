"""Listing inputs: image folders (class sub-folders give labels), CSV/JSONL lists, masks.

The list is made once, in a fixed order that does not depend on how the file system lists
entries, so the shard plan depends only on the inputs and the config."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prep import PrepError
from prep.run.inputs import check_file, reject_record, walk

IMAGE_EXTS = frozenset(
    [
        ".jpg",
        ".jpeg",
        ".jpe",
        ".png",
        ".bmp",
        ".gif",
        ".tif",
        ".tiff",
        ".webp",
        ".ppm",
        ".pgm",
        ".pbm",
        ".pnm",
        ".jfif",
    ]
)


@dataclass(frozen=True)
class Item:
    path: Path
    rel: str  # the name recorded in rejects and used for pairing masks (posix, relative)
    label: int | None = None
    mask: Path | None = None


@dataclass
class Listing:
    items: list[Item]
    classes: list[str] | None
    rejects: list[dict[str, Any]] = field(default_factory=list)
    fingerprint: list[tuple[str, int, int]] = field(default_factory=list)


def _mask_index(masks: Path) -> dict[str, Path]:
    """Masks by relative stem ("cat/001" -> masks/cat/001.png). A mask that cannot be read (a
    FIFO, a broken link) is indexed too: its image is rejected for it (mask_not_file...)."""
    files, rejects = walk(masks, IMAGE_EXTS)
    index: dict[str, Path] = {}
    for rel, path in files:
        index.setdefault(rel.rsplit(".", 1)[0], path)  # sorted: .png before .tif for one stem
    for r in rejects:
        index.setdefault(r["path"].rsplit(".", 1)[0], masks / r["path"])
    return index


def _fingerprint(items: list[Item]) -> list[tuple[str, int, int]]:
    """(name, bytes, mtime) of every input and mask: what --resume compares with the first run."""
    out = []
    for it in items:
        for path, name in ((it.path, it.rel), (it.mask, f"{it.rel} mask")):
            if path is not None:
                try:
                    st = path.stat()
                    out.append((name, st.st_size, st.st_mtime_ns))
                except OSError:  # gone since it was listed: decoding will reject it
                    out.append((name, -1, -1))
    return out


def list_folder(src: Path) -> tuple[list[Item], list[str] | None, list[dict[str, Any]]]:
    """Class sub-folders (sorted names, like torchvision's ImageFolder) or a flat folder."""
    files, rejects = walk(src, IMAGE_EXTS)
    top = [rel for rel, _ in files if "/" not in rel]
    has_classes = any("/" in rel for rel, _ in files)
    if not has_classes:
        return [Item(p, rel) for rel, p in files], None, rejects
    classes = sorted({rel.split("/", 1)[0] for rel, _ in files if "/" in rel})
    label_of = {c: i for i, c in enumerate(classes)}
    items = [Item(p, rel, label_of[rel.split("/", 1)[0]]) for rel, p in files if "/" in rel]
    for rel in top:
        rejects.append(
            reject_record(
                rel, "no_class", "image beside class folders: move it into one, or list it in a CSV"
            )
        )
    return items, classes, rejects


def list_file(
    src: Path, limit: int | None = None
) -> tuple[list[Item], list[str] | None, list[dict[str, Any]]]:
    """A CSV or JSONL list with `path` (relative to the list), optional `label` and `mask`.

    Rows keep the list's order; `limit` keeps the first rows. Integer labels are used as they
    are; class names map to their index in the sorted set of all the list's names."""
    base = src.parent
    try:
        if src.suffix.lower() == ".csv":
            with open(src, newline="", encoding="utf-8-sig") as f:
                rows: list[dict[str, Any]] = list(csv.DictReader(f))
        else:
            with open(src, encoding="utf-8-sig") as f:
                rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as e:
        raise PrepError(
            f"{src}: cannot read the list ({e}). HINT: a CSV with a header row or "
            "JSON lines with a 'path' key"
        ) from e
    for n, r in enumerate(rows, start=2 if src.suffix.lower() == ".csv" else 1):
        if not isinstance(r, dict) or not r.get("path"):
            raise PrepError(
                f"{src}: line {n} has no 'path'. HINT: every row names its image "
                "in a 'path' column (CSV with a header row) or key (JSON lines)"
            )
    labels = [r.get("label") for r in rows]
    named = [str(x) for x in labels if x not in (None, "")]
    numeric = all(str(x).lstrip("-").isdigit() for x in named)
    classes = None if numeric or not named else sorted(set(named))
    index = {c: i for i, c in enumerate(classes or [])}
    items: list[Item] = []
    rejects: list[dict[str, Any]] = []
    for r, label in list(zip(rows, labels, strict=True))[:limit]:
        rel = str(r["path"])
        path = base / rel
        problem = check_file(path, rel)
        if problem is not None:
            if problem["reason"] == "missing":
                problem["message"] = f"listed in {src.name} but not found"
            rejects.append(problem)
            continue
        lab = None if label in (None, "") else (int(label) if numeric else index[str(label)])
        if lab is not None and lab < 0:
            rejects.append(reject_record(rel, "bad_label", f"label {lab} is negative"))
            continue
        mask = base / str(r["mask"]) if r.get("mask") else None
        items.append(Item(path, rel, lab, mask))
    if named and len(named) != len(rows):
        raise PrepError(f"{src}: some rows have a label and some do not. HINT: label every row")
    return items, classes, rejects


def list_images(src: Path, masks: Path | None = None, limit: int | None = None) -> Listing:
    """Every image input of SRC (a folder or a .csv/.jsonl list), paired with its mask."""
    if not src.exists():
        raise PrepError(
            f"{src} does not exist. HINT: pass a folder of images or a .csv/.jsonl list"
        )
    if src.is_dir():
        items, classes, rejects = list_folder(src)
        if limit is not None:  # the first N names, usable or not: rejects count among them
            names = sorted(
                [(it.rel, i, True) for i, it in enumerate(items)]
                + [(str(r["path"]), i, False) for i, r in enumerate(rejects)]
            )[:limit]
            items = [items[i] for _, i, usable in names if usable]
            rejects = [rejects[i] for _, i, usable in names if not usable]
    elif src.suffix.lower() in (".csv", ".jsonl", ".json"):
        items, classes, rejects = list_file(src, limit)
    else:
        raise PrepError(f"{src} is not a folder or a .csv/.jsonl list")
    if masks is not None and not masks.is_dir():
        raise PrepError(f"mask folder {masks} does not exist. HINT: --masks DIR")
    index = _mask_index(masks) if masks is not None else {}
    if masks is not None or any(it.mask for it in items):
        paired = []
        for it in items:
            mask = it.mask or index.get(it.rel.rsplit(".", 1)[0])
            if mask is None:
                rejects.append(
                    reject_record(
                        it.rel,
                        "mask_missing",
                        f"no mask with the same stem under {masks}" if masks else "no mask listed",
                    )
                )
                continue
            paired.append(Item(it.path, it.rel, it.label, mask))
        items = paired
    return Listing(items, classes, rejects, _fingerprint(items))
