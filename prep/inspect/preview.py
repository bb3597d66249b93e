"""prep preview: a contact sheet of packed samples, to see a wrong rotation, a bad crop or a
misaligned mask at a glance. Numpy and Pillow only: samples are read from the shards' memory maps.

Sheet layout: a header line, then tiles in row-major order, each `tile` px square with a caption
strip under it ("index class", then the source file when the dataset stores it), GAP px between
tiles. A sample is shown as stored: no rescaling, no crop; a `--mode keep` sample smaller than
its tile sits in its centre on the sheet's colour.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loaders.fields.base import decode_source
from loaders.format import Manifest, array_name, read_manifest
from loaders.format.legacy.arrays import FIELDS
from prep.inspect.sheet import (
    BLANK_SHARE,
    PreviewResult,
    contact_sheet,
    in_tile,
    near_one_colour_share,
    overlay,
    save_image,
)
from prep.inspect.stored import first_samples, open_images
from prep.run.errors import PrepError


def _array(field: str, size: int) -> str:
    """The array of `field` at `size`: image_64 for a sized field, label for a size-free one."""
    return array_name(field, size if FIELDS[field].sized else None)


def _captions(
    m: Manifest, count: int, labels: list[np.ndarray] | None, sources: list[str] | None
) -> list[str]:
    """ "index class" (or "index label N", or "index"), then the source file on a line of its
    own when the dataset stores it."""
    out = []
    for i in range(count):
        text = str(i)
        if labels is not None:
            label = int(labels[i])
            text += f" {m.classes[label]}" if m.classes else f" label {label}"
        out.append(text if sources is None else f"{text}\n{sources[i]}")
    return out


def preview(
    root: Path,
    size: int | None = None,
    count: int = 64,
    output: Path = Path("sheet.png"),
    columns: int | None = None,
    masks: bool = True,
) -> PreviewResult:
    """Write a contact sheet of the first `count` samples at `size` px (default: the smallest
    stored size) to `output` (any format Pillow writes, by extension). A volume dataset
    shows the middle slices of its volumes (prep.inspect.volumes)."""
    if read_manifest(root).kind == "volumes":
        from prep.inspect.volumes import preview_volumes

        return preview_volumes(root, count, output, columns, masks)
    if count < 1 or (columns is not None and columns < 1):
        raise PrepError("--count and --columns must be at least 1")
    store, size = open_images(root, size, "preview shows")
    m = store.manifest
    count = min(count, m.num_samples)
    if count == 0:
        raise PrepError(f"{root} holds no samples")
    images = first_samples(store, _array("image", size), count, size)
    mask_name, label_name = _array("mask", size), _array("label", size)
    has_masks = masks and mask_name in m.arrays
    mask_arr = first_samples(store, mask_name, count, size) if has_masks else None
    labels = first_samples(store, label_name, count, size) if label_name in m.arrays else None
    sources = None
    if "source" in m.arrays:  # datasets packed before sources were stored have none
        sources = [decode_source(b) for b in first_samples(store, "source", count, None)]
    captions = _captions(m, count, labels, sources)
    blank = sum(near_one_colour_share(img) > BLANK_SHARE for img in images)
    tiles = [
        in_tile(overlay(img, None if mask_arr is None else mask_arr[i]), size)
        for i, img in enumerate(images)
    ]
    title = f"{root.name}: samples 0-{count - 1} of {m.num_samples} at {size} px"
    sheet, layout = contact_sheet(tiles, captions, title, columns)
    save_image(sheet, output)
    return PreviewResult(output, count, size, has_masks, layout, blank)
