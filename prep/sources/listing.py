"""Every image input of a pack run, listed once: a folder or a .csv/.jsonl list
(prep.sources.images), its masks paired, and its split:

- `--splits train,val`: the named sub-folders of SRC, each holding class folders as a plain SRC
  does; an input's name (`rel`) keeps its split folder (`val/cat/1.jpg`).
- `--val-fraction F`: an input is in "val" when the hash of its path relative to SRC is below
  F (the cell hash of `prep table --key`, prep.sources.hashsplit), else in "train": renaming
  other files, adding files or reordering never moves an input between splits.

The classes are the sorted names over every split, so a label means one class in all of them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from prep.run.errors import PrepError
from prep.run.inputs import reject_record
from prep.sources.images import Item, Listing, fingerprint, list_file, list_folder, mask_index


def list_images(
    src: Path,
    masks: Path | None = None,
    limit: int | None = None,
    splits: list[str] | None = None,
    val_fraction: float = 0.0,
) -> Listing:
    """Every image input of SRC (a folder or a .csv/.jsonl list), paired with its mask, and its
    split: the sub-folders `splits` of SRC, or "train"/"val" by `val_fraction` (hashed_splits)."""
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
    if val_fraction > 0:
        items = hashed_splits(items, val_fraction)
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


def hashed_splits(items: list[Item], val_fraction: float) -> list[Item]:
    """Each item in "val" or "train" by the hash of its path relative to SRC (`rel`)."""
    import pyarrow as pa

    from prep.sources.hashsplit import cell_hash

    if not items:
        return items
    hashes = cell_hash(pa.array([it.rel for it in items], pa.string()))
    val = hashes < np.uint64(int(val_fraction * 2**64))
    return [replace(it, split="val" if v else "train") for it, v in zip(items, val, strict=True)]


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
    """The manifest's `extra.splits`: each split's sample count and samples per class (the
    listing's inputs less the shards' rejects); {} for a dataset without splits."""
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
