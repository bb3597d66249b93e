"""prep report's sections that every dataset shares or that read only the manifest: the header,
counts per split and class, source sizes, rejects by reason, an image field's pixel statistics,
the arrays."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from loaders.format import Manifest
from loaders.format.arrays import records
from prep.inspect.html import Section, bars, categories, channels, esc, histograms, para, table
from prep.inspect.report import header, mb

FIRST_REJECTS = 5  # paths shown a reject reason


def lead(root: Path, m: Manifest) -> list[str]:
    """The header's lines: what the dataset is (prep info's header), its size on disk, when the
    report was made."""
    on_disk = sum(f.bytes for s in m.shards for f in s.files.values())
    made = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    return [header(root, m), f"{mb(on_disk)} on disk; report made {made}"]


def split_of(m: Manifest) -> np.ndarray:
    """Each sample's split name ("all" for a dataset without splits)."""
    return np.repeat(np.array([s or "all" for s in m.split_of()], dtype=object), m.counts())


def counts(
    m: Manifest, labels: np.ndarray | None, what: str = "samples", names: Sequence[str] = ()
) -> Section:
    """Bars of the samples per split and class (`labels`: one class id a sample, or an object's
    class ids with `what="objects"`), the imbalance ratio, and classes no sample has."""
    classes = list(names or m.classes or [])
    if labels is None:
        per = Counter(split_of(m).tolist())
        return Section("counts", "Counts", table(["split", what], sorted(per.items())))
    splits = split_of(m) if what == "samples" else np.full(len(labels), "all", dtype=object)
    series: dict[str, dict[str, int]] = {}
    for split in dict.fromkeys(splits.tolist()):
        ids, n = np.unique(labels[splits == split], return_counts=True)
        name = [classes[i] if 0 <= i < len(classes) else f"label {i}" for i in ids.tolist()]
        series[str(split)] = dict(zip(name, n.tolist(), strict=True))
    total = Counter[str]()
    for part in series.values():
        total.update(part)
    chart = bars(series, f"{what} per class" + (" and split" if len(series) > 1 else ""))
    body = f'<div class="charts">{chart}</div>'
    if total:
        big, small = max(total.values()), min(total.values())
        body += para(
            f"{len(total)} classes; largest {big:,} {what}, smallest {small:,}: "
            f"imbalance {big / small:.1f}x"
        )
    missing = [c for c in classes if c not in total]
    if missing:
        shown = ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else "")
        body += para(f"{len(missing)} classes with no {what}: {shown}", "bad")
    rows = [(c, *(part.get(c, 0) for part in series.values())) for c in total]
    body += f"<details><summary>table</summary>{table(['class', *series], rows)}</details>"
    return Section("counts", "Counts", body)


def sizes(orig: np.ndarray | None, stored: np.ndarray | None = None) -> Section:
    """Histograms of the sources' width, height and aspect ratio (w / h), from `orig_size`
    ((N, 2) h, w); without it, of the stored sides (`stored`, mode keep), said so."""
    hw, said = (orig, "source") if orig is not None else (stored, "stored")
    if hw is None or not len(hw):
        return Section("sizes", "Source sizes", para("this dataset stores no orig_size", "note"))
    h, w = hw[:, 0].astype(np.float64), hw[:, 1].astype(np.float64)
    aspect = w / np.maximum(h, 1)
    panels = [(f"{said} width (px)", w), (f"{said} height (px)", h), ("aspect (w / h)", aspect)]
    text = (
        f"{len(hw):,} samples: width {w.min():.0f}-{w.max():.0f} px (median {np.median(w):.0f}), "
        f"height {h.min():.0f}-{h.max():.0f} px (median {np.median(h):.0f}); "
        f"{int((aspect > 2).sum() + (aspect < 0.5).sum()):,} with an aspect past 2:1"
    )
    return Section("sizes", f"Sizes ({said})", histograms(panels) + para(text), True)


def rejects(root: Path, m: Manifest) -> Section:
    """Rejects by reason (bars), each reason with its first FIRST_REJECTS paths and messages,
    from rejects.jsonl (read once, checked: loaders.format.arrays); what could not be read
    is one warning."""
    by = Counter[str]()
    first: dict[str, list[Mapping[str, str]]] = {}
    problems: list[str] = []
    for r in records(root, problems):
        reason = r["reason"]
        by[reason] += 1
        if by[reason] <= FIRST_REJECTS:
            first.setdefault(reason, []).append(r)
    warning = "".join(para(p, "bad") for p in problems)
    if not by:
        said = para(f"no rejects ({m.rejects} in the manifest)")
        return Section("rejects", "Rejects", warning + said)
    order = [r for r, _ in by.most_common()]
    chart = categories([("rejected inputs", order, [by[r] for r in order])])
    rows = [(why, r["path"], r["message"]) for why in order for r in first[why]]
    body = (
        warning
        + para(f"{by.total():,} rejected inputs, {len(by)} reasons (rejects.jsonl)", "bad")
        + chart
        + table(["reason", "path", "message"], rows)
    )
    return Section("rejects", "Rejects", body, wide=True)


def stats(m: Manifest, image: str) -> Section:
    """The per-channel mean and std stored for image field `image` (extra.stats, checked when
    the field was declared: Image.check_extra) at each size, as `Normalize.from_dataset`
    reads them."""
    got = m.extra.get("stats")
    got = got.get(image) if isinstance(got, dict) else None
    if not isinstance(got, dict) or not got["sizes"]:
        text = "no pixel statistics stored (packed before prep stored them): repack to get them"
        return Section("stats", "Pixel statistics", para(text, "note"))
    rows, chart = [], ""
    for size, at in got["sizes"].items():
        mean, std = at["mean"], at["std"]
        rows.append((f"{size} px", _nums(mean), _nums(std), _count(at["pixels"])))
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


def _count(n: int) -> str:
    """A pixel count; "?" past float's range (an int of hundreds of digits prep did not write)."""
    try:
        return f"{float(n):,.0f}"
    except OverflowError:
        return "?"


def _nums(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def fields(m: Manifest) -> Section:
    """The arrays: field, dtype, per-item shape and codec (`prep info` has their bytes)."""
    rows = []
    for name, spec in sorted(m.arrays.items()):
        rows.append((name, spec.field, spec.dtype, str(list(spec.shape)), spec.codec))
    return Section("fields", "Fields", table(["array", "field", "dtype", "shape", "codec"], rows))
