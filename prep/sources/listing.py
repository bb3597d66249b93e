"""Every image input of a pack run, listed once: a folder or a .csv/.jsonl list
(prep.sources.images), its masks paired, and its split (prep.sources.splits)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prep.run.errors import PrepError
from prep.run.inputs import reject_record
from prep.sources import splits as by_split
from prep.sources.images import (
    Listing,
    fingerprint,
    list_file,
    list_folder,
    mask_index,
)


def list_images(
    src: Path,
    masks: Path | None = None,
    limit: int | None = None,
    splits: list[str] | None = None,
    val_fraction: float = 0.0,
) -> Listing:
    """Every image input of SRC (a folder or a .csv/.jsonl list), paired with its mask, and its
    split: the sub-folders `splits` of SRC, or "train"/"val" by `val_fraction` (images.splits)."""
    if not src.exists():
        raise PrepError(
            f"{src} does not exist. HINT: pass a folder of images or a .csv/.jsonl list"
        )
    folders = splits is not None and val_fraction == 0
    if folders and not src.is_dir():
        raise PrepError(f"{src} is not a folder. HINT: --splits packs sub-folders of a folder")
    if src.is_dir():
        if folders:
            items, classes, rejects = by_split.list_split_folders(src, splits or [])
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
            paired.append(replace(it, mask=mask))
        items = paired
    if val_fraction > 0:
        items = by_split.hashed_splits(items, val_fraction)
    if splits is not None:
        by_split.check_classes(src, items, classes, splits)
    return Listing(items, classes, rejects, fingerprint(items), splits)
