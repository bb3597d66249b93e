"""prep report's sections of each field kind (SECTIONS), and the grid of any picture field (a
fixed seed: the same page for the same dataset). Each reads a bounded sample of a large dataset
(GRID_BUDGET, ROWS_READ, TOKENS_READ, VALUES_SHOWN) and says on the page what it read."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from loaders.fields import Audio, Column, Field, Image, Json, Label, Text, Tokens, Volume
from loaders.fields.column import NAT
from loaders.format import OFFSETS, FormatError, Manifest
from loaders.format.arrays import safe_path
from prep.inspect.html import (
    Section,
    categories,
    channels,
    esc,
    figure,
    grid,
    histograms,
    para,
    table,
)
from prep.inspect.preview import TILE_MAX, captions, shrink
from prep.inspect.stored import Stored
from prep.media.text.tokenizers import load_saved
from prep.run.errors import PrepError

ROWS_READ = 200_000  # rows read for a column's histogram, at random: its shape settles
TOKENS_READ = 50_000_000  # tokens counted a split (uint16 bincount: about 0.1 s a 50M)
TOP_TOKENS = 30
DENSE = 1 << 24  # ids counted in an array as long as the largest (128 MiB at most), else sorted
VALUES_SHOWN = 8  # a text field's values shown
GRID_BUDGET = 256  # samples in a grid at most, whatever the class count: bounds the file's size

Sections = Callable[[Stored, list[str]], list[Section]]
# What a tokenizer file prep did not write may raise ({"chars": [1, 2]}, nested too deep)
UNREADABLE = (PrepError, FormatError, OSError, ValueError, LookupError, TypeError, RecursionError)


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
    firsts = [order[start : start + take] for start in starts[:GRID_BUDGET].tolist()]
    kept = zip(values[:GRID_BUDGET].tolist(), firsts, strict=True)
    return {int(v): np.sort(perm[at][shuffled[at] == v]) for v, at in kept}


def thumbs(
    st: Stored, picture: str, indices: Sequence[int], said: Sequence[str] | None = None
) -> list[list[str]]:
    """Each sample's pictures as <figure>s, the fields drawn on them, or (`said`) bare."""
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
            named = [first, what, *texts, source.rsplit("/", 1)[-1]]
            text = " ".join(named if said is None else [said[j], what])
            out[j].append(figure(rgb, " ".join(text.split()), source))
    return out


def samples(st: Stored, picture: str, per_class: int) -> Section:
    """Rows of samples, one a class of the dataset's label, drawn by thumbs."""
    name, labels = st.labels()
    per_sample = labels if isinstance(st.fields.get(name or ""), Label) else None
    picked = pick(per_sample, len(st), per_class)
    every = np.concatenate(list(picked.values())) if picked else np.zeros(0, np.int64)
    if not len(every):
        return Section("samples", "Samples", para("no samples", "note"))
    tiles = thumbs(st, picture, every.tolist())
    rows, at = [], 0
    for label, idx in picked.items():
        if per_sample is not None and name is not None:
            total = int(np.count_nonzero(per_sample == label))
            named = st.fields[name].caption(label)
            count = f"<span class='note'>({len(idx)} of {total:,})</span>"
            rows.append(f"<h3>{esc(named)} {count}</h3>")
        rows.append(grid([t for one in tiles[at : at + len(idx)] for t in one]))
        at += len(idx)
    drawn = st.on(picture)
    shown = f"{len(every):,} of {len(st):,} samples, picked at random"
    shown += f", at {st.size} px" if st.size else ""
    head = para(shown + (f"; drawn on them: {', '.join(sorted(drawn))}" if drawn else ""))
    title = "Samples per class" if per_sample is not None else "Samples"
    return Section("samples", title, head + "".join(rows), wide=True)


def image(st: Stored, names: list[str]) -> list[Section]:
    """Each image field's pixel statistics; histograms of the sources' sizes (orig_size), else
    of the stored."""
    found = [stats(st.m, n) for n in names]
    orig = st.column("orig_size") if "orig_size" in st.m.arrays else None
    arrs = [a for a in st.fields[names[0]].arrays(names[0]) if a.role == "hw" and a.size == st.size]
    stored = st.column(f"{arrs[0].field}_{st.size}") if arrs and orig is None else None
    hw, said = (orig, "source") if orig is not None else (stored, "stored")
    if hw is None or not len(hw):
        note = para("this dataset stores no orig_size", "note")
        return [*found, Section("sizes", "Source sizes", note)]
    h, w = hw[:, 0].astype(np.float64), hw[:, 1].astype(np.float64)
    aspect = w / np.maximum(h, 1)
    panels = [(f"{said} width (px)", w), (f"{said} height (px)", h), ("aspect (w / h)", aspect)]
    text = (
        f"{len(hw):,} samples: width {w.min():.0f}-{w.max():.0f} px (median {np.median(w):.0f}), "
        f"height {h.min():.0f}-{h.max():.0f} px (median {np.median(h):.0f}); "
        f"{int((aspect > 2).sum() + (aspect < 0.5).sum()):,} with an aspect past 2:1"
    )
    return [*found, Section("sizes", f"Sizes ({said})", histograms(panels) + para(text), True)]


def stats(m: Manifest, image: str) -> Section:
    """The per-channel mean and std stored for image field `image` (extra.stats) a size."""
    got = m.extra.get("stats")
    got = got.get(image) if isinstance(got, dict) else None
    if not isinstance(got, dict) or not got["sizes"]:
        text = "no pixel statistics stored (packed before prep stored them): repack to get them"
        return Section("stats", "Pixel statistics", para(text, "note"))
    rows, chart = [], ""
    for size, at in got["sizes"].items():
        mean, std = at["mean"], at["std"]
        mean_std = [", ".join(f"{v:.2f}" for v in vs) for vs in (mean, std)]
        try:  # "?" past float's range (an int of hundreds of digits prep did not write)
            pixels = f"{float(at['pixels']):,.0f}"
        except OverflowError:
            pixels = "?"
        rows.append((f"{size} px", *mean_std, pixels))
        chart = chart or channels(mean, std, f"mean ± std at {size} px")
    text = f"over the {got['split']} split" if got.get("split") else "over every sample"
    code = "Normalize.from_dataset(ds" + (")" if image == "image" else f", field={image!r})")
    return Section(
        "stats",
        "Pixel statistics",
        chart
        + table(["size", "mean (0-255)", "std (0-255)", "pixels"], rows)
        + f"<p>{esc(text)}; <code>{esc(code)}</code> reads them.</p>",
    )


def volume(st: Stored, names: list[str]) -> list[Section]:
    """The stored shapes of the first volume field, a histogram an axis."""
    shapes = st.column(f"{names[0]}_shape").astype(np.float64).reshape(-1, 3)
    panels = [(f"axis {a} (voxels)", shapes[:, a]) for a in range(3)]
    return [Section("sizes", "Sizes (stored shapes)", histograms(panels, bins=20), True)]


def tokens(st: Stored, names: list[str]) -> list[Section]:
    """Documents and tokens per split, their lengths, and the first split's commonest tokens."""
    name = names[0]
    f: Tokens = st.fields[name]  # type: ignore[assignment]
    lengths: dict[str, list[np.ndarray]] = {}
    read: list[np.ndarray] = []  # the first split's ids, TOKENS_READ at most
    for s in st.shards.tolist():
        split = st.m.shards[s].split or "all"
        lengths.setdefault(split, []).append(np.diff(st.store.array(s, name + ".offsets")))
        left = TOKENS_READ - sum(map(len, read))
        if split == next(iter(lengths)) and left > 0:
            read.append(np.asarray(st.store.array(s, name)[:left]))
    per = {k: np.concatenate(v) - (f.eot_id is not None) for k, v in lengths.items()}
    rows = [(k, f"{len(v):,}", f"{int(v.sum()):,}", f"{np.median(v):.0f}") for k, v in per.items()]
    body = table(["split", "documents", "tokens", "median length"], rows)
    panels = [(f"{k}: tokens a document", v) for k, v in per.items()]
    many = sum(len(v) for v in per.values()) > 1000  # a long tail shows on a log count axis
    chart, listing = _common(st, f, next(iter(lengths)), read)
    body += '<div class="charts">' + histograms(panels, log=many) + chart + "</div>"
    return [Section("tokens", "Tokens", body + listing, True)]


def _common(st: Stored, f: Tokens, split: str, read: list[np.ndarray]) -> tuple[str, str]:
    """A chart and a table of the TOP_TOKENS commonest ids of `read`, end-of-document left out."""
    ids = np.concatenate(read)
    ids = ids[ids < f.vocab_size]  # ids past it are prep verify's to name
    if len(ids) and int(ids.max()) < DENSE:
        got = np.bincount(ids)
        seen = np.flatnonzero(got)
        got = got[seen]
    else:  # a count array as long as the largest id would be GiBs (a vocab_size of 2**32)
        seen, got = np.unique(ids, return_counts=True)
    if f.eot_id is not None:
        got[seen == f.eot_id] = 0
    top = np.argsort(got, kind="stable")[::-1][:TOP_TOKENS]
    top = top[got[top] > 0]
    note = ""
    try:
        if f.tokenizer:  # FormatError for a file outside the dataset (a link, a .. path)
            safe_path(st.root, f.tokenizer)
        tok = load_saved(str(f.tokenizer_name), st.root, f.tokenizer)
        names = [repr(tok.decode([int(seen[t])])) for t in top]
    except UNREADABLE as e:
        names = [f"id {int(seen[t])}" for t in top]
        note = para(f"the tokenizer cannot be read ({type(e).__name__}: {e!s:.120}): ids shown")
    chart = categories([(f"{split}: most common tokens", names, got[top].tolist())])
    total = max(1, int(got.sum()))
    rows = [
        (int(seen[t]), n, f"{int(got[t]):,}", f"{got[t] / total:.2%}")
        for t, n in zip(top, names, strict=True)
    ]
    return chart, note + table(["id", "text", "count", "share"], rows)


def columns(st: Stored, names: list[str]) -> list[Section]:
    """A chart of each column over up to ROWS_READ rows at random, and the columns' table."""
    n = len(st)
    idx = np.sort(np.random.default_rng(0).permutation(n)[:ROWS_READ])
    panels, cats, rows = [], [], []
    for name in names:
        f: Column = st.fields[name]  # type: ignore[assignment]
        values = st.column(name)[idx]
        label = f.name + (" (target)" if f.role == "target" else "")
        if f.vocab is not None:
            codes, k = np.unique(values, return_counts=True)
            cats.append((label, [f.caption(c) or "(missing)" for c in codes], k.tolist()))
        else:
            x = values.astype(np.float64)
            if f.type == "time":
                x[values == NAT] = np.nan
            if f.mask:
                x[st.column(f"{name}_missing")[idx] > 0] = np.nan
            panels.append((label, x))
        rows.append((f.name, name, f.role, f.type or f.dtype, f.missing, f.lo, f.hi))
    shown = [histograms(panels[k : k + 4]) for k in range(0, len(panels), 4)]
    shown += [categories(cats[k : k + 3]) for k in range(0, len(cats), 3)]
    said = f"{len(idx):,} of {n:,} rows" + (", sampled at random" if len(idx) < n else "")
    body = para(said) + '<div class="charts">' + "".join(shown) + "</div>"
    heads = ["column", "array", "role", "type", "missing", "low", "high"]
    body += table(heads, [["" if v is None else v for v in r] for r in rows])
    return [Section("table", "Columns", body, True)]


def audio(st: Stored, names: list[str]) -> list[Section]:
    """Each clip's length (from the offsets: nothing decoded) as a histogram."""
    name = names[0]
    f: Audio = st.fields[name]  # type: ignore[assignment]
    ends = [np.diff(st.store.array(int(s), name + OFFSETS)) for s in st.shards]  # no decoding
    seconds = np.concatenate([np.zeros(0), *ends]) / f.channels / f.rate
    if not len(seconds):
        return []
    lo, hi, mid = seconds.min(), seconds.max(), np.median(seconds)
    said = (
        f"{len(seconds):,} clips, {seconds.sum():,.1f} s at {f.rate} Hz, {f.channels} channel(s), "
        f"{f.dtype}: {lo:.2f}-{hi:.2f} s a clip (median {mid:.2f} s); AudioDataset pads clips "
        "shorter than its window"
    )
    chart = histograms([("clip length (s)", seconds)], bins=20)
    return [Section("audio", "Clips", chart + para(said), True)]


def values(st: Stored, names: list[str]) -> list[Section]:
    """The values of each text and JSON field for the first VALUES_SHOWN samples."""
    shown = range(min(VALUES_SHOWN, len(st)))
    rows = [(i, *(st.fields[n].caption(st.value(n, i))[:200] for n in names)) for i in shown]
    return [Section("values", "Values", table(["sample", *names], rows), True)]


SECTIONS: dict[type[Field], Sections] = {
    Image: image,
    Volume: volume,
    Tokens: tokens,
    Column: columns,
    Audio: audio,
    Text: values,
    Json: values,
}


def of_fields(st: Stored) -> list[Section]:
    """The sections of the dataset's field kinds (SECTIONS), each once for its fields."""
    by: dict[Sections, list[str]] = {}
    for name, f in st.fields.items():
        if type(f) in SECTIONS:
            by.setdefault(SECTIONS[type(f)], []).append(name)
    return [s for make, names in by.items() for s in make(st, names)]
