"""The checks of a samples dataset: its manifest's fields against its arrays (when read), and
each shard's values against its fields (with the folder's, loaders.format.checks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from loaders.format.arrays import Layout, read_layout
from loaders.format.schema import OFFSETS, Manifest, Shard, array_name
from loaders.samples.image import Image, Mask, hw_name
from loaders.samples.registry import fields_from


def check_samples(
    manifest: Manifest, shard: Shard, arrays: dict[str, tuple[Path, Layout]]
) -> list[str]:
    """Counts, offsets (from 0, never decreasing, to the data's end), then each field's values:
    labels in their classes, token ids below vocab_size, image sides 1..size (read whole).
    `arrays` may hold some of the shard's arrays only (a URL's files as they arrive): each
    field is checked once all of its arrays are there."""
    found = []
    values: dict[str, np.ndarray] = {}
    for name, ref in shard.arrays.items():
        if name not in arrays:
            continue
        if ref.offsets is None:
            if ref.length != shard.count:
                found.append(f"array {name} has {ref.length} samples, the shard {shard.count}")
            continue
        if name + OFFSETS not in arrays:
            continue
        path, layout = arrays[name + OFFSETS]
        off = values[name + OFFSETS] = read_layout(path, layout)
        ok = len(off) == shard.count + 1 and (not len(off) or off[0] == 0)
        if not ok or np.any(np.diff(off) < 0) or (len(off) and off[-1] != ref.length):
            found.append(
                f"{path}: the offsets of {name} are not {shard.count + 1} from 0 to its end"
            )
    if found:
        return found
    fields = fields_from(manifest.extra.get("fields"), manifest)
    for name, f in fields.items():
        mine = [array_name(s.field, s.size) for s in f.arrays(name)]
        if not all(n in arrays for n in mine):
            continue
        got = {n: values[n] if n in values else read_layout(*arrays[n]) for n in mine}
        got |= {n + OFFSETS: values[n + OFFSETS] for n in mine if n + OFFSETS in values}
        found += f.problems(name, got)
        if isinstance(f, (Image, Mask)):
            found += _image_problems(name, f, manifest, arrays, got)
    return found


def _image_problems(
    name: str, f: Image | Mask, manifest: Manifest, arrays: dict[str, Any], got: dict[str, Any]
) -> list[str]:
    """Mode keep: each stored side 1..size, raw samples of h * w * C elements."""
    image = f.image if isinstance(f, Mask) else name
    for size in f.sizes:
        hw_array = hw_name(image, size)
        if hw_array not in arrays or array_name(name, size) not in arrays:
            continue
        hw = read_layout(*arrays[hw_array]).astype(np.int64)
        if len(hw) and (hw.min() < 1 or hw.max() > size):
            return [f"{arrays[hw_array][0]}: a side of {image} is not 1..{size} px"]
        spec = manifest.arrays[array_name(name, size)]
        off = got.get(array_name(name, size) + OFFSETS)
        channels = spec.shape[2] if len(spec.shape) == 3 else 1
        steps = hw[:, 0] * hw[:, 1] * channels
        if spec.codec == "ragged" and off is not None and not np.array_equal(np.diff(off), steps):
            return [f"the offsets of {name} at {size} do not step by each sample's h * w * C"]
    return []
