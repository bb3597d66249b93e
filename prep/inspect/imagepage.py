"""prep report's sections for pictures: image datasets (kind images) and samples datasets with
an image field (kind samples: its Label, Mask and Boxes fields), at the smallest stored size.

The grid shows up to `per_class` samples of each class, picked at random over the whole
dataset (gallery.pick), with masks overlaid and boxes drawn: a mask that misses its object, a
crop that cuts it off, a box on the wrong object shows at a glance.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from loaders.format import Manifest, array_name
from loaders.read.store import ShardStore
from prep.inspect import gallery, kindpages, sections
from prep.inspect.gallery import ImageArrays
from prep.inspect.html import Section, esc, figure, grid, para


def image_kind(root: os.PathLike[str], m: Manifest, per_class: int) -> list[Section]:
    """The sections of an image dataset: counts, source sizes, the grid, pixel statistics."""
    store = ShardStore(root, "images")
    arrays, size = pictures(store) or (ImageArrays("", None, None), 0)
    labels = gallery.column(store, "label") if "label" in m.arrays else None
    orig = gallery.column(store, "orig_size") if "orig_size" in m.arrays else None
    stored = gallery.column(store, arrays.hw) if arrays.hw and orig is None else None
    return [
        sections.counts(m, labels),
        sections.stats(m),
        sections.sizes(orig, stored),
        samples_grid(store, arrays, labels, per_class, size),
    ]


def samples_kind(root: os.PathLike[str], m: Manifest, per_class: int) -> list[Section]:
    """The sections of a samples dataset: counts by its Label field (or, for detection, of its
    objects by their labels), sizes, and the grid of its first image field."""
    from loaders.fields.registry import fields_from

    store = ShardStore(root, "samples")
    declared = fields_from(m.extra.get("fields"), root)
    label = next((n for n, f in declared.items() if f.kind == "label"), None)
    labels = gallery.column(store, label) if label else None
    names = list(getattr(declared.get(label or ""), "classes", None) or m.classes or [])
    out = [sections.counts(m, labels, names=names)]
    found = pictures(store)
    if found is None:  # audio, or samples of arrays alone
        return [*out, *kindpages.audio_sections(store, m), sections.fields(m)]
    arrays, size = found
    if arrays.boxes and "labels" in m.arrays and m.arrays["labels"].ragged:
        arrays = replace(arrays, box_labels="labels")
        if labels is None:  # detection: its objects counted by class
            objects = np.concatenate([store.array(s, "labels") for s in range(len(m.shards))])
            out = [sections.counts(m, objects.astype(np.int64), "objects", names)]
    orig = gallery.column(store, "orig_size") if "orig_size" in m.arrays else None
    stored = gallery.column(store, arrays.hw) if arrays.hw and orig is None else None
    return [
        *out,
        sections.sizes(orig, stored),
        samples_grid(store, arrays, labels, per_class, size, names),
        sections.fields(m),
    ]


def pictures(store: ShardStore) -> tuple[ImageArrays, int] | None:
    """The arrays of an image or samples dataset's (first) image field at its smallest size,
    with its mask and boxes, and that size; None for samples without an image field."""
    m = store.manifest
    size = min(m.sizes()) if m.sizes() else 0
    if m.kind == "images":
        arrays = _sidecars(m, ImageArrays(array_name("image", size), None, None), "", size)
        mask = array_name("mask", size)
        return replace(arrays, mask=mask if mask in m.arrays else None), size
    from loaders.fields.registry import fields_from

    declared = fields_from(m.extra.get("fields"), store.root)
    image = next((n for n, f in declared.items() if f.kind == "image"), None)
    if image is None:
        return None
    arrays = _sidecars(m, ImageArrays(array_name(image, size), None, None), f"{image}_", size)
    for name, f in declared.items():
        if f.kind == "mask" and getattr(f, "image", None) == image:
            arrays = replace(arrays, mask=array_name(name, size))
        if f.kind == "boxes" and getattr(f, "image", None) == image:
            arrays = replace(arrays, boxes=array_name(name, size))
    return arrays, size


def _sidecars(m: Manifest, arrays: ImageArrays, prefix: str, size: int) -> ImageArrays:
    """The image's stored (h, w) (mode keep) and JPEG checksums, where the dataset has them:
    hw_256 and crc_256 in an image dataset (`prefix` ""), image_hw_256 in samples."""
    hw, crc = array_name(f"{prefix}hw", size), array_name(f"{prefix}crc", size)
    return replace(arrays, hw=hw if hw in m.arrays else None, crc=crc if crc in m.arrays else None)


def samples_grid(
    store: ShardStore,
    arrays: ImageArrays,
    labels: np.ndarray | None,
    per_class: int,
    size: int,
    names: Sequence[str] = (),
) -> Section:
    """Rows of samples, one a class (`names`: the class names, default the manifest's), as
    stored at `size` (shrunk past gallery.TILE_MAX)."""
    m = store.manifest
    picked = gallery.pick(labels, m.num_samples, per_class)
    every = np.concatenate(list(picked.values())) if picked else np.zeros(0, np.int64)
    if not len(every):
        return Section("samples", "Samples", para("no samples", "note"))
    tiles = _tiles(store, arrays, every, size)
    classes = list(names or m.classes or [])
    rows, at = [], 0
    for label, idx in picked.items():
        name = "" if label < 0 else classes[label] if label < len(classes) else f"label {label}"
        total = m.num_samples if labels is None else int((labels == label).sum())
        if name:
            rows.append(f"<h3>{esc(name)} <span class='note'>({len(idx)} of {total:,})</span></h3>")
        rows.append(grid(tiles[at : at + len(idx)]))
        at += len(idx)
    drawn = [w for w, a in (("masks overlaid", arrays.mask), ("boxes drawn", arrays.boxes)) if a]
    title = "Samples per class" if labels is not None else "Samples"
    shown = f"{len(every):,} of {m.num_samples:,} samples, picked at random, at {size} px"
    head = para(shown + (f"; {', '.join(drawn)}" if drawn else ""))
    title += f" ({', '.join(drawn)})" if drawn else ""
    return Section("samples", title, head + "".join(rows), wide=True)


def _tiles(store: ShardStore, arrays: ImageArrays, indices: np.ndarray, size: int) -> list[str]:
    """Each sample as a captioned <figure>: index (and its boxes), its source file in the
    tooltip."""
    order = np.argsort(indices, kind="stable")  # read in storage order, shown in the caller's
    images = gallery.images(store, arrays, indices[order], size)
    masks = gallery.masks(store, arrays, indices[order], size) if arrays.mask else None
    boxes = gallery.read(store, arrays.boxes, indices[order]) if arrays.boxes else None
    ids = gallery.read(store, arrays.box_labels, indices[order]) if arrays.box_labels else None
    shard, local = gallery.locate(store, indices[order])
    out = [""] * len(indices)
    for j, pos in enumerate(order.tolist()):
        rgb, scale = gallery.tile(images[j], None if masks is None else masks[j])
        caption = str(int(indices[pos]))
        if boxes is not None:
            rgb = gallery.boxed(rgb, boxes[j], None if ids is None else ids[j], scale)
            caption += f" ({len(np.asarray(boxes[j]).reshape(-1, 4))} boxes)"
        source = store.source(int(shard[j]), int(local[j])) or ""
        out[pos] = figure(
            rgb, caption + (f" {source.rsplit('/', 1)[-1]}" if source else ""), source
        )
    return out
