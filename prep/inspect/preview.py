"""prep preview: a contact sheet of a dataset's first samples, to see a wrong rotation, a bad
crop or a misaligned mask at a glance; or, for a dataset without pictures (a table, tokens,
text), its first rows as text. Numpy and Pillow only: samples are read from the shards' maps.

Each sample is its picture field's pictures (an image; a video's frames; a volume's middle
slices: one row of tiles a sample) with the fields drawn on it (Field.draw) and a caption
("index class (2 boxes)", then each text field, the source among them, on a line of its own).
A sample is shown as stored: no crop, no rescaling but to fit its tile; a `--mode keep`
sample smaller than its tile sits in its centre on the sheet's colour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Json, Label, Labels, Text
from prep.inspect.sheet import (
    BLANK_SHARE,
    PreviewResult,
    contact_sheet,
    in_tile,
    near_one_colour_share,
    save_image,
)
from prep.inspect.stored import Stored
from prep.run.errors import PrepError

TILE_CAP = 256  # px: the largest tile for pictures not of a stored size (volume slices)


def captions(st: Stored, i: int, known: dict[str, Any]) -> tuple[str, list[str]]:
    """Sample i's caption: its index and the short captions of its fields, then the captions
    of its text fields, each a line (`known`: values read already, by field)."""
    first, lines = str(i), []
    named = sorted(st.fields.items(), key=lambda nf: not isinstance(nf[1], Label | Labels))
    for name, f in named:  # the class first
        said = f.caption(known[name] if name in known else st.value(name, i))
        if said and isinstance(f, Text | Json):
            lines.append(said)
        elif said:
            first += f" {said}"
    return first, lines


def preview(
    root: Path,
    size: int | None = None,
    count: int = 64,
    output: Path = Path("sheet.png"),
    columns: int | None = None,
    masks: bool = True,
) -> PreviewResult:
    """Write a contact sheet of the first `count` samples at `size` px (default: the smallest
    stored size) to `output` (any format Pillow writes, by extension)."""
    if count < 1 or (columns is not None and columns < 1):
        raise PrepError("--count and --columns must be at least 1")
    st = Stored(root, size)
    picture = st.picture()
    if picture is None:  # the CLI prints rows() instead
        raise PrepError(f"{root} has no field that makes pictures (images, video, volumes)")
    count = min(count, len(st))
    if count == 0:
        raise PrepError(f"{root} holds no samples")
    drawn = st.on(picture) if masks else []
    pictures, texts, blank = [], [], 0
    for i in range(count):
        known = {n: st.value(n, i) for n in (picture, *drawn)}
        shown = st.fields[picture].pictures(known[picture])
        drawn_on = [p for p, _ in shown]
        blank += near_one_colour_share(drawn_on[0]) > BLANK_SHARE
        for name in drawn:
            drawn_on = st.fields[name].draw(drawn_on, known[name], 1.0)
        first, lines = captions(st, i, known)
        pictures.append(drawn_on)
        texts.append(["\n".join([f"{first} {what}".rstrip(), *lines]) for _, what in shown])
    side = min(max(max(p.shape[:2]) for row in pictures for p in row), max(TILE_CAP, st.size or 0))
    per = max(map(len, pictures))  # pictures a sample: one row a sample when more than one
    blank_tile = in_tile(np.zeros((0, 0, 3), np.uint8), side)
    tiles = [in_tile(p, side) for row in pictures for p in row + [blank_tile] * (per - len(row))]
    said = [t for row in texts for t in row + [""] * (per - len(row))]
    title = f"{st.root.name}: samples 0-{count - 1} of {len(st)} at {st.size or side} px"
    sheet, layout = contact_sheet(tiles, said, title, columns or (per if per > 1 else None))
    save_image(sheet, output)
    return PreviewResult(output, count, st.size or side, bool(drawn), layout, blank)


def rows(root: Path, count: int = 10) -> str:
    """The first `count` samples as text, a row each: the split, then each field's caption
    (a column's cell as the table had it, a clip's length, a document's tokens)."""
    st = Stored(root)
    count = min(count, len(st))
    heads = ["split", *(str(getattr(f, "name", "") or n) for n, f in st.fields.items())]
    splits = st.splits()
    table = [heads] + [
        [str(splits[i]), *(f.caption(st.value(n, i)) for n, f in st.fields.items())]
        for i in range(count)
    ]
    widths = [min(20, max(len(r[j]) for r in table)) for j in range(len(heads))]
    return "\n".join(
        "  ".join(v[:20].ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in table
    )
