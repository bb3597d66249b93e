"""The checks of a samples dataset: its manifest's fields against its arrays (when read), and
each shard's values against its fields (with the folder's, loaders.format.checks)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from loaders.fields.image import Image, Mask, hw_name
from loaders.fields.registry import fields_from
from loaders.format.arrays import Layout, read_layout
from loaders.format.schema import OFFSETS, Manifest, Shard, array_name


def check_samples(
    manifest: Manifest, shard: Shard, arrays: dict[str, tuple[Path, Layout]]
) -> list[str]:
    """Counts, offsets (from 0, never decreasing, to the data's end), then each field's checks:
    labels in their classes, ragged rows whole, image sides 1..size. Only the arrays a check
    uses are read (offsets, labels, sides: a few bytes a sample; never the pixels or text), each
    once. Token ids against vocab_size are a value check of `prep verify` (format.values).
    `arrays` may hold some of the shard's arrays only (a URL's files as they arrive): each
    field is checked once all of its arrays are there."""
    found = []
    values = _Read(arrays)
    for name, ref in shard.arrays.items():
        if name not in arrays:
            continue
        if ref.offsets is None:
            if ref.length != shard.count:
                found.append(f"array {name} has {ref.length} samples, the shard {shard.count}")
            continue
        if name + OFFSETS not in arrays:
            continue
        path = arrays[name + OFFSETS][0]
        off = values[name + OFFSETS]
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
        found += f.problems(name, values)
        if isinstance(f, (Image, Mask)):
            found += _image_problems(name, f, manifest, values)
    return found


class _Read(Mapping[str, np.ndarray]):
    """A shard's arrays by name, each read whole the first time a check asks for it."""

    def __init__(self, layouts: dict[str, tuple[Path, Layout]]):
        self.layouts, self.read = layouts, dict[str, np.ndarray]()

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.read:
            self.read[name] = read_layout(*self.layouts[name])
        return self.read[name]

    def __contains__(self, name: object) -> bool:  # a look at the layouts: nothing is read
        return name in self.layouts

    def __iter__(self) -> Iterator[str]:
        return iter(self.layouts)

    def __len__(self) -> int:
        return len(self.layouts)


def _image_problems(name: str, f: Image | Mask, manifest: Manifest, values: _Read) -> list[str]:
    """Mode keep: each stored side 1..size, raw samples of h * w * C elements."""
    image = f.image if isinstance(f, Mask) else name
    for size in f.sizes:
        hw_array = hw_name(image, size)
        if hw_array not in values or array_name(name, size) not in values:
            continue
        hw = values[hw_array].astype(np.int64)
        if len(hw) and (hw.min() < 1 or hw.max() > size):
            return [f"{values.layouts[hw_array][0]}: a side of {image} is not 1..{size} px"]
        spec = manifest.arrays[array_name(name, size)]
        off = values.get(array_name(name, size) + OFFSETS)
        channels = spec.shape[2] if len(spec.shape) == 3 else 1
        steps = hw[:, 0] * hw[:, 1] * channels
        if spec.codec == "ragged" and off is not None and not np.array_equal(np.diff(off), steps):
            return [f"the offsets of {name} at {size} do not step by each sample's h * w * C"]
    return []
