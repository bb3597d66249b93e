"""prep report's grids: samples picked at random within each class (a fixed seed: the same page
for the same dataset), each its picture field's pictures shrunk to TILE_MAX with the fields drawn
on them and captioned by its fields. A grid reads only the samples it shows: its labels and the
few hundred picked, never a pass over the pixels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prep.inspect.html import figure
from prep.inspect.preview import TILE_MAX, captions, shrink
from prep.inspect.stored import Stored

GRID_BUDGET = 256  # samples in a grid at most, whatever the class count: bounds the file's size


def pick(labels: np.ndarray | None, n: int, per_class: int, seed: int = 0) -> dict[int, np.ndarray]:
    """Up to `per_class` sorted random indices of each label (key -1 without labels), at most
    GRID_BUDGET in all.

    >>> {k: v.tolist() for k, v in pick(np.array([0, 1, 0, 1, 1]), 5, 9).items()}
    {0: [0, 2], 1: [1, 3, 4]}
    """
    rng = np.random.default_rng(seed)
    if labels is None:
        return {-1: np.sort(rng.permutation(n)[: min(per_class, GRID_BUDGET)])}
    perm = rng.permutation(len(labels))
    shuffled = labels[perm]
    order = np.argsort(shuffled, kind="stable")
    values, starts = np.unique(shuffled[order], return_index=True)
    take = max(1, min(per_class, GRID_BUDGET // max(1, len(values))))
    out = {}
    for v, start in zip(values[:GRID_BUDGET].tolist(), starts[:GRID_BUDGET].tolist(), strict=False):
        group = shuffled[order[start : start + take]]
        out[int(v)] = np.sort(perm[order[start : start + take]][group == v])
    return out


def thumbs(
    st: Stored, picture: str, indices: Sequence[int], said: Sequence[str] | None = None
) -> list[list[str]]:
    """Each sample's pictures as <figure>s (a list a sample, in the order of `indices`), the
    fields drawn on them and captioned by its fields, or (`said`) bare under those captions."""
    order = np.argsort(np.asarray(indices), kind="stable").tolist()  # read in storage order
    out: list[list[str]] = [[] for _ in indices]
    f = st.fields[picture]
    drawn = st.on(picture) if said is None else []
    for j in order:
        i = int(indices[j])
        known = {n: st.value(n, i) for n in (picture, *drawn)}
        source = st.source(i) if "source" in st.m.arrays else ""
        shown = f.pictures(known[picture])
        small = [shrink(rgb, TILE_MAX) for rgb, _ in shown]
        pictures = [rgb for rgb, _ in small]
        for name in drawn:  # at the first's scale: a sample's pictures share one (its frames)
            pictures = st.fields[name].draw(pictures, known[name], small[0][1])
        first, lines = captions(st, i, known) if said is None else ("", [])
        texts = [t[:40] for t in lines if t != source][:1]  # a caption, cut
        for rgb, (_, what) in zip(pictures, shown, strict=True):
            if said is None:
                text = " ".join([first, what, *texts, source.rsplit("/", 1)[-1]])
            else:
                text = f"{said[j]} {what}"
            out[j].append(figure(rgb, " ".join(text.split()), source))
    return out
