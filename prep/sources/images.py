"""Listing image (and video) inputs: folders (class sub-folders give labels), CSV/JSONL lists,
masks and splits (docs/images.md: `--splits`, `--val-fraction`), in an order that depends only on
the inputs; the classes are the sorted names over every split (one meaning in all of them)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from prep.run.errors import PrepError
from prep.run.inputs import INTEGER, check_file, class_folders, read_rows, reject_record, walk

IMAGE_EXTS = frozenset(
    ".jpg .jpeg .jpe .png .bmp .gif .tif .tiff .webp .ppm .pgm .pbm .pnm .jfif".split()  # noqa: SIM905
)
VIDEO_EXTS = frozenset(
    ".mp4 .m4v .mov .mkv .webm .avi .mpg .mpeg .ts .flv .wmv .3gp .ogv .gif".split()  # noqa: SIM905
)


@dataclass(frozen=True)
class Item:
    path: Path
    rel: str  # the name recorded in rejects and used for pairing masks (posix, relative)
    label: int | None = None
    mask: Path | None = None
    split: str | None = None  # --splits or --val-fraction: the split it goes to


@dataclass
class Listing:
    items: list[Item]
    classes: list[str] | None
    rejects: list[dict[str, Any]] = field(default_factory=list)
    fingerprint: list[tuple[str, int, int]] = field(default_factory=list)
    splits: list[str] | None = None  # in --splits order; the first is the training split


def mask_index(masks: Path) -> dict[str, Path]:
    """Masks by relative stem ("cat/001" -> masks/cat/001.png), unreadable ones too."""
    files, rejects = walk(masks, IMAGE_EXTS)
    index: dict[str, Path] = {}
    for rel, path in files:
        index.setdefault(rel.rsplit(".", 1)[0], path)  # sorted: .png before .tif for one stem
    for r in rejects:
        index.setdefault(r["path"].rsplit(".", 1)[0], masks / r["path"])
    return index


def fingerprint(items: list[Item]) -> list[tuple[str, int, int]]:
    """(name, bytes, mtime) of every input and mask: what --resume compares with the first run."""
    out = []
    for it in items:
        for path, name in ((it.path, it.rel), (it.mask, f"{it.rel} mask")):
            if path is not None:
                try:
                    st = path.stat()
                    out.append((name, st.st_size, st.st_mtime_ns))
                except (OSError, ValueError):  # gone, or a bad name: decoding rejects it
                    out.append((name, -1, -1))
    return out


def list_folder(
    src: Path, exts: frozenset[str] = IMAGE_EXTS, what: str = "image"
) -> tuple[list[Item], list[str] | None, list[dict[str, Any]]]:
    """The files of `exts` in class sub-folders (sorted, as ImageFolder) or a flat folder."""
    files, rejects = walk(src, exts)
    labelled, classes, strays = class_folders(files, what)
    return [Item(p, rel, label) for rel, p, label in labelled], classes, rejects + strays


MAX_LABEL = 2**31 - 1  # the largest class id: it fits int32, and every label dtype we store
_HINT_KINDS = "labels are all integers (class ids, ASCII digits) or all class names"


def _label(src: Path, n: int, value: Any) -> int | str | None:
    """A label as read: an int when it is an ASCII decimal integer, else a class name."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        if not INTEGER.fullmatch(value):
            return value
        sign, digits = value[: value.startswith("-")], value.lstrip("-").lstrip("0") or "0"
        return int(sign + digits[:100])  # int() refuses 4300 digits; 100 are past any bound
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise PrepError(
        f"{src}: line {n} has the label {value!r}, not an integer or a string. HINT: {_HINT_KINDS}"
    )


def _labels(src: Path, rows: list[tuple[int, Any]]) -> tuple[list[int | None], list[str] | None]:
    """Every row's label (ints, or class indices) and the class names; integers mixed with
    names fail (a name for each would silently renumber them)."""
    labels = [_label(src, n, r.get("label")) for n, r in rows]
    given = [(n, x) for (n, _), x in zip(rows, labels, strict=True) if x is not None]
    if given and len(given) != len(rows):
        n = next(n for (n, _), x in zip(rows, labels, strict=True) if x is None)
        raise PrepError(
            f"{src}: line {n} has no label, while {len(given)} rows have one. HINT: label every row"
        )
    ints = [(n, x) for n, x in given if isinstance(x, int)]
    names = [(n, x) for n, x in given if isinstance(x, str)]
    if ints and names:
        odd, other = (ints, names) if len(ints) < len(names) else (names, ints)
        (n, value), (m, example) = odd[0], other[0]
        raise PrepError(
            f"{src}: line {n} has the label {str(value)!r}, but {len(other)} rows have "
            f"{'integer labels' if other is ints else 'class names'} (line {m}: "
            f"{str(example)!r}). HINT: {_HINT_KINDS}; fix that row"
        )
    if not names:
        return [x if isinstance(x, int) else None for x in labels], None
    classes = sorted({x for _, x in names})
    index = {c: i for i, c in enumerate(classes)}
    return [index[x] if isinstance(x, str) else None for x in labels], classes


def list_file(
    src: Path, limit: int | None = None
) -> tuple[list[Item], list[str] | None, list[dict[str, Any]]]:
    """A CSV or JSONL list's rows of `path` (relative to the list), `label` and `mask`, in order."""
    rows = read_rows(src)
    for n, r in rows:
        if not isinstance(r, dict) or r.get("path") in (None, ""):
            raise PrepError(
                f"{src}: line {n} has no 'path'. HINT: every row names its image "
                "in a 'path' column (CSV with a header row) or key (JSON lines)"
            )
        for key in ("path", "mask"):
            if r.get(key) is not None and not isinstance(r[key], str):
                raise PrepError(
                    f"{src}: line {n} has a {key!r} that is not a string ({r[key]!r}). "
                    "HINT: write the file name as a JSON string"
                )
    labels, classes = _labels(src, rows)
    items: list[Item] = []
    rejects: list[dict[str, Any]] = []
    for (_, r), label in list(zip(rows, labels, strict=True))[:limit]:
        rel = str(r["path"])
        path = src.parent / rel
        problem = check_file(path, rel)
        if problem is not None:
            if problem["reason"] == "missing":
                problem["message"] = f"listed in {src.name} but not found"
            rejects.append(problem)
            continue
        if label is not None and classes is None and not 0 <= label <= MAX_LABEL:
            shown = str(label) if len(str(label)) <= 30 or label < 0 else f"{str(label)[:20]}..."
            why = "is negative" if label < 0 else f"is over {MAX_LABEL}, the largest class id"
            rejects.append(reject_record(rel, "bad_label", f"label {shown} {why}"))
            continue
        mask = src.parent / r["mask"] if r.get("mask") else None
        items.append(Item(path, rel, label, mask))
    return items, classes, rejects


def list_videos(
    src: Path, limit: int | None = None
) -> tuple[list[Item], list[str] | None, list[dict[str, Any]]]:
    """Every video of SRC, a folder or a CSV/JSONL list: (items, class names or None, rejects)."""
    if not src.exists():
        raise PrepError(f"{src} does not exist. HINT: pass a folder of videos or a .csv list")
    if src.is_file():
        if src.suffix.lower() not in (".csv", ".jsonl", ".json"):
            raise PrepError(
                f"{src} is not a folder or a .csv/.jsonl list of videos. HINT: pass the folder "
                f"that holds it ({src.parent}), or list it in a CSV with a path column"
            )
        return list_file(src, limit)
    items, classes, rejects = list_folder(src, VIDEO_EXTS, "video")
    return items[:limit], classes, rejects


def list_images(
    src: Path,
    masks: Path | None = None,
    limit: int | None = None,
    splits: list[str] | None = None,
    val_fraction: float = 0.0,
) -> Listing:
    """Every image input of SRC, paired with its mask, and its split."""
    if not src.exists():
        raise PrepError(
            f"{src} does not exist. HINT: pass a folder of images or a .csv/.jsonl list"
        )
    folders = splits is not None and val_fraction == 0
    if folders and not src.is_dir():
        raise PrepError(f"{src} is not a folder. HINT: --splits packs sub-folders of a folder")
    if src.is_dir():
        if folders:
            items, classes, rejects = list_split_folders(src, splits or [])
        else:
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
    index = mask_index(masks) if masks is not None else {}
    if masks is not None or any(it.mask for it in items):
        paired = []
        why = f"no mask with the same stem under {masks}" if masks else "no mask listed"
        for it in items:
            mask = it.mask or index.get(it.rel.rsplit(".", 1)[0])
            if mask is None:
                rejects.append(reject_record(it.rel, "mask_missing", why))
            else:
                paired.append(replace(it, mask=mask))
        items = paired
    if val_fraction > 0 and items:  # "val" or "train" by the hash of the path under SRC
        import pyarrow as pa

        from prep.sources.hashsplit import cell_hash

        hashes = cell_hash(pa.array([it.rel for it in items], pa.string()))
        val = hashes < np.uint64(int(val_fraction * 2**64))
        items = [
            replace(it, split="val" if v else "train") for it, v in zip(items, val, strict=True)
        ]
    if splits is not None:
        check_classes(src, items, classes, splits)
    return Listing(items, classes, rejects, fingerprint(items), splits)


def list_split_folders(
    src: Path, splits: list[str]
) -> tuple[list[Item], list[str] | None, list[dict[str, Any]]]:
    """Every split folder's class folders as one listing: items in split order, sorted names."""
    found: list[tuple[str, list[Item], list[str] | None]] = []
    rejects: list[dict[str, Any]] = []
    for split in splits:
        folder = src / split
        if not folder.is_dir():
            have = sorted(p.name for p in src.iterdir() if p.is_dir())
            raise PrepError(
                f"{folder} is not a folder (--splits {','.join(splits)}). HINT: SRC holds one "
                f"sub-folder per split; {src} has {', '.join(have) or 'none'}"
            )
        items, classes, bad = list_folder(folder)
        if items and classes is None:
            raise PrepError(
                f"{folder} holds images but no class folders. HINT: with --splits each split "
                f"folder holds class folders: {folder}/<class>/*.jpg"
            )
        found.append((split, items, classes))
        rejects += [{**r, "path": f"{split}/{r['path']}"} for r in bad]
    classes = sorted({c for _, _, names in found for c in names or ()})
    index = {c: i for i, c in enumerate(classes)}
    out: list[Item] = []
    for split, items, names in found:
        ids = [index[c] for c in names or ()]  # the folder's class ids -> the dataset's
        for it in items:
            label = None if it.label is None else ids[it.label]
            out.append(replace(it, rel=f"{split}/{it.rel}", label=label, split=split))
    return out, classes, rejects


def check_classes(
    src: Path, items: list[Item], classes: list[str] | None, splits: list[str]
) -> None:
    """PrepError naming a class that some split has and the training split (the first) lacks."""
    if not classes:
        return
    first = splits[0]
    trained = {it.label for it in items if it.split == first}
    for it in items:
        if it.label not in trained and it.label is not None:
            name = classes[it.label]
            folder = src / it.rel.rsplit("/", 1)[0]
            raise PrepError(
                f"class {name!r} ({folder}) has {it.split} images but no {first} images. HINT: "
                f"add {first} images of {name!r}, or remove {folder}"
            )


def split_counts(listing: Listing, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest's `extra.splits`: samples and samples per class a split; {} without splits."""
    if listing.splits is None:
        return {}
    rejected = {r["path"] for rec in records for r in rec.get("rejects", ())}
    out: dict[str, Any] = {}
    for split in listing.splits:
        count = sum(rec["shard"]["count"] for rec in records if rec["shard"]["split"] == split)
        out[split] = {"samples": count}
        if listing.classes:
            mine = (it for it in listing.items if it.split == split)
            kept = [it.label for it in mine if it.rel not in rejected]
            per = np.bincount(np.asarray(kept, dtype=np.int64), minlength=len(listing.classes))
            out[split]["per_class"] = per.tolist()
    return {"splits": out}
