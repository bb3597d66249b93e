"""Train/val (and more) splits of one image dataset: each input's split, and one class map.

- `--splits train,val`: the named sub-folders of SRC, each holding class folders as a plain SRC
  does; an input's name (`rel`) keeps its split folder (`val/cat/1.jpg`).
- `--val-fraction F`: an input is in "val" when the hash of its path relative to SRC is below
  F (the cell hash of `prep table --key`, prep.sources.hashsplit), else in "train": renaming
  other files, adding files or reordering never moves an input between splits.

The classes are the sorted names over every split, so a label means one class in all of them.
A class that the training split (the first) lacks is an error naming it and its folder: a model
trained on that split could never predict it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from prep.run.errors import PrepError
from prep.sources.images import Item, Listing, list_folder


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
