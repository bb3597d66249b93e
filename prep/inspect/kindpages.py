"""prep report's sections for volumes (middle slices, shapes), tables (a histogram per column),
tokens (document lengths, the most common tokens) and audio (clip lengths, source rates), read
through the loaders' readers.

Each reads a bounded sample of a large dataset: at most ROWS_READ table rows, TOKENS_READ
tokens a split, `per_class` volumes; what it read is said on the page.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from loaders.format import OFFSETS, Manifest
from loaders.read.store import ShardStore
from prep.inspect import charts, sections
from prep.inspect.html import Section, figure, grid, para, table
from prep.inspect.numbers import number, shown

ROWS_READ = 200_000  # table rows read for the histograms, at random: a histogram's shape settles
TOKENS_READ = 50_000_000  # tokens counted a split (uint16 bincount: about 0.1 s a 50M)
TOP_TOKENS = 30
SLICE_SIDE = 128  # px: the longer side of a middle slice on the page (gallery.TILE_MAX)


def _window(planes: Sequence[np.ndarray]) -> list[np.ndarray]:
    """uint8 planes: uint8 volumes as stored, others from their 0.5th to 99.5th percentile
    (over the three planes together, so that they share one grey scale)."""
    if planes[0].dtype == np.uint8:
        return list(planes)
    lo, hi = np.percentile(np.concatenate([p.ravel() for p in planes]), [0.5, 99.5])
    k = 255 / max(float(hi - lo), 1e-6)
    return [
        np.rint(np.clip((p.astype(np.float32) - lo) * k, 0, 255)).astype(np.uint8) for p in planes
    ]


def volume_kind(root: os.PathLike[str], m: Manifest, per_class: int) -> list[Section]:
    """Counts, stored shapes, and the middle slice across each axis of up to `per_class`
    volumes picked at random, labels overlaid."""
    from loaders import VolumeDataset
    from prep.inspect.gallery import tile
    from prep.inspect.volumes import middle_slices, scaled

    ds = VolumeDataset(root)
    shapes = np.array([ds.shape(v) for v in range(len(ds))], dtype=np.float64).reshape(-1, 3)
    panels = [(f"axis {a} (voxels)", shapes[:, a]) for a in range(3)]
    picked = np.sort(np.random.default_rng(0).permutation(len(ds))[: max(1, per_class)])
    orient = str(m.extra.get("orient", "???"))
    rows = []
    for v in picked.tolist():
        planes = _window(middle_slices(np.asarray(ds.volume(v))))
        marks = middle_slices(np.asarray(ds.volume(v, "label"))) if "label" in ds.fields else None
        tiles = []
        for a, plane in enumerate(planes):
            side = SLICE_SIDE
            img = scaled(plane, side)[..., None]
            mask = None if marks is None else scaled(marks[a], side)
            path = str(m.extra["volumes"][v].get("path", "")) if "volumes" in m.extra else ""
            tiles.append(figure(tile(img, mask)[0], f"{v} {orient[a]} {path}", path))
        rows.append(grid(tiles))
    said = f"{len(picked)} of {len(ds)} volumes, middle slices across each axis ({orient})"
    labels = "; labels overlaid" if "label" in ds.fields else ""
    return [
        sections.counts(m, None, "volumes"),
        Section("sizes", "Sizes (stored shapes)", charts.histograms(panels, bins=20), True),
        Section("volumes", "Middle slices", para(said + labels) + "".join(rows), True),
    ]


def table_kind(root: os.PathLike[str], m: Manifest, per_class: int) -> list[Section]:
    """Counts per split, then a histogram of each numeric column and the value counts of each
    categorical one, over the train split (its rows sampled past ROWS_READ)."""
    from loaders import TableDataset

    ds = TableDataset(root, "train")
    n = len(ds)
    idx = np.sort(np.random.default_rng(0).permutation(n)[:ROWS_READ])
    tensors = ds.__getitems__(idx.tolist()).tensors
    x_num, x_cat = tensors[0].numpy(), tensors[1].numpy()
    panels = [(name, x_num[:, j]) for j, name in enumerate(ds.numeric_columns)]
    if ds.target is not None and ds.classes is None:
        panels.append((f"{ds.target} (target)", tensors[2].numpy().astype(np.float64)))
    cats = []
    for j, name in enumerate(ds.categorical_columns):
        values, counts = np.unique(x_cat[:, j], return_counts=True)
        cats.append((name, ds.decode(name, values), counts.tolist()))
    if ds.target is not None and ds.classes is not None:
        values, counts = np.unique(tensors[2].numpy(), return_counts=True)
        cats.append((f"{ds.target} (target)", ds.decode(ds.target, values), counts.tolist()))
    charts_ = [charts.histograms(panels[k : k + 4]) for k in range(0, len(panels), 4)]
    charts_ += [charts.categories(cats[k : k + 3]) for k in range(0, len(cats), 3)]
    rows = [
        (c["name"], c["role"], c["kind"], c.get("missing", 0), c.get("lo", ""), c.get("hi", ""))
        for c in m.extra.get("columns", [])
    ]
    said = f"{len(idx):,} of {n:,} train rows" + (", sampled at random" if len(idx) < n else "")
    body = para(said) + '<div class="charts">' + "".join(charts_) + "</div>"
    body += table(["column", "role", "kind", "missing", "low", "high"], rows)
    return [sections.counts(m, None, "rows"), Section("table", "Columns", body, True)]


def token_kind(root: os.PathLike[str], m: Manifest, per_class: int) -> list[Section]:
    """Documents and tokens per split, the document length histogram of each split, and the
    most common tokens of the first (decoded by the dataset's tokenizer)."""
    store = ShardStore(root, "tokens")
    eot = m.extra.get("eot_id")
    lengths: dict[str, list[np.ndarray]] = {}
    counts: dict[str, np.ndarray] = {}
    for s, shard in enumerate(m.shards):
        split = shard.split or "all"
        lengths.setdefault(split, []).append(np.diff(store.array(s, "doc_offsets")))
        have = counts.get(split)
        read = int(have.sum()) if have is not None else 0
        if read < TOKENS_READ:
            tokens = np.asarray(store.array(s, "tokens")[: TOKENS_READ - read])
            got = np.bincount(tokens, minlength=int(m.extra.get("vocab_size", 0)))
            counts[split] = got if have is None else _add(have, got)
    per = {k: np.concatenate(v) - (eot is not None) for k, v in lengths.items()}
    rows = [(k, f"{len(v):,}", f"{int(v.sum()):,}", f"{np.median(v):.0f}") for k, v in per.items()]
    body = table(["split", "documents", "tokens", "median length"], rows)
    panels = [(f"{k}: tokens a document", v) for k, v in per.items()]
    many = sum(len(v) for v in per.values()) > 1000  # a long tail shows on a log count axis
    body += '<div class="charts">' + charts.histograms(panels, log=many)
    chart, listing = _common(root, counts, eot)
    body += chart + "</div>" + listing
    return [sections.counts(m, None, "documents"), Section("tokens", "Tokens", body, True)]


def audio_sections(store: ShardStore, m: Manifest) -> list[Section]:
    """A `prep audio` dataset's clip lengths and source rates as histograms, from the ragged
    offsets and the source_rate field (nothing decoded); [] for other samples datasets. The
    channels are the array's row shape; a rate that is not a positive number (a manifest prep
    did not write) leaves the lengths in frames."""
    info = m.extra.get("audio")
    if not isinstance(info, dict) or "audio" not in m.arrays or not m.shards:
        return []
    channels = max(1, int(np.prod(m.arrays["audio"].shape, dtype=np.int64)))
    rate = number(info.get("rate"), 1)
    ends = [np.diff(np.asarray(store.array(s, "audio" + OFFSETS))) for s in range(len(m.shards))]
    lengths = np.concatenate(ends) / channels / (rate or 1)
    if not len(lengths):
        return []
    unit, each, total = ("s", ".2f", ",.1f") if rate else ("frames", ",.0f", ",.0f")
    panels = [(f"clip length ({unit})", lengths)]
    if "source_rate" in m.arrays:
        rates = np.concatenate([store.array(s, "source_rate") for s in range(len(m.shards))])
        panels.append(("source sample rate (Hz)", rates.astype(np.float64)))
    lo, hi, mid = lengths.min(), lengths.max(), np.median(lengths)
    said = (
        f"{len(lengths):,} clips, {lengths.sum():{total}} {unit} at {shown(rate, 'g')} Hz, "
        f"{channels} channel(s), {info.get('dtype')}: {lo:{each}}-{hi:{each}} {unit} a clip "
        f"(median {mid:{each}} {unit}); AudioDataset pads clips shorter than its window"
    )
    return [Section("audio", "Clips", charts.histograms(panels, bins=20) + para(said), True)]


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = max(len(a), len(b))
    return np.pad(a, (0, n - len(a))) + np.pad(b, (0, n - len(b)))


def _common(
    root: os.PathLike[str], counts: dict[str, np.ndarray], eot: int | None
) -> tuple[str, str]:
    """The TOP_TOKENS most common tokens of the first split (the end-of-document token left
    out), each with its text: a chart and a table."""
    from loaders.format import FormatError
    from prep.media.text.tokenizers import load_tokenizer
    from prep.run.errors import PrepError

    split, got = next(iter(counts.items()))
    got = got.copy()
    if eot is not None and eot < len(got):
        got[eot] = 0
    top = np.argsort(got, kind="stable")[::-1][:TOP_TOKENS]
    top = top[got[top] > 0]
    note = ""
    try:
        tok = load_tokenizer(root)
        names = [repr(tok.decode([int(t)])) for t in top]
    except (
        PrepError,
        FormatError,
        OSError,
        ValueError,
        LookupError,
        TypeError,
        RecursionError,
    ) as e:
        # no tokenizer file, or one prep did not write ({"chars": [1, 2]}, nested too deep)
        names = [f"id {int(t)}" for t in top]
        note = para(
            f"the tokenizer cannot be read ({type(e).__name__}: {e!s:.120}): ids shown", "note"
        )
    chart = charts.categories([(f"{split}: most common tokens", names, got[top].tolist())])
    total = max(1, int(got.sum()))
    rows = [
        (int(t), n, f"{int(got[t]):,}", f"{got[t] / total:.2%}")
        for t, n in zip(top, names, strict=True)
    ]
    return chart, note + table(["id", "text", "count", "share"], rows)
