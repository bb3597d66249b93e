"""prep report: one self-contained HTML page about a packed dataset: counts by label, the field
kinds' sections (pages), near-duplicates and leakage (dupes), rejects and arrays; the folder is
opened through the loaders' checks first (load_manifest: a damaged dataset is one FormatError)."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from loaders.fields import Image, Label, Labels, Scores
from loaders.fields.checks import load_manifest
from loaders.format import Manifest
from loaders.format.arrays import records
from prep.inspect import dupes, issues, pages
from prep.inspect.html import Section, bars, categories, page, para, table
from prep.inspect.report import header, mb
from prep.inspect.stored import Stored
from prep.inspect.tune import check_plot
from prep.run.errors import PrepError, UsageError
from prep.run.files import atomic_write_text
from prep.run.guard import REPORT
from prep.run.parallel import progress

PER_CLASS = 8  # grid samples a class, by default
MAX_PER_CLASS = 256
FIRST_REJECTS = 5  # paths shown a reject reason


def _counts(st: Stored) -> Section:
    """Samples per split and class of its Label field, or objects per class of its Labels."""
    name, labels = st.labels()
    f = st.fields.get(name or "")
    names = list(f.classes or []) if isinstance(f, Label | Labels) else []
    return counts(st.m, labels, "objects" if isinstance(f, Labels) else "samples", names)


def counts(
    m: Manifest, labels: np.ndarray | None, what: str = "samples", names: Sequence[str] = ()
) -> Section:
    """Bars of the samples (or `what`) per split and class, the imbalance, the empty classes."""
    classes = list(names or m.classes or [])
    split_of = np.repeat(np.array([s or "all" for s in m.split_of()], dtype=object), m.counts())
    if labels is None:
        per = Counter(split_of.tolist())
        return Section("counts", "Counts", table(["split", what], sorted(per.items())))
    splits = split_of if what == "samples" else np.full(len(labels), "all", dtype=object)
    series: dict[str, dict[str, int]] = {}
    for split in dict.fromkeys(splits.tolist()):
        ids, n = np.unique(labels[splits == split], return_counts=True)
        named = [classes[i] if 0 <= i < len(classes) else f"label {i}" for i in ids.tolist()]
        series[str(split)] = dict(zip(named, n.tolist(), strict=True))
    total = sum((Counter(part) for part in series.values()), Counter[str]())
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


def rejects(root: Path, m: Manifest) -> Section:
    """Rejects by reason, their first FIRST_REJECTS paths, from rejects.jsonl."""
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


def fields(m: Manifest) -> Section:
    """The arrays: field, dtype, per-item shape and codec (`prep info` has their bytes)."""
    arrays = sorted(m.arrays.items())
    rows = [(name, s.field, s.dtype, str(list(s.shape)), s.codec) for name, s in arrays]
    return Section("fields", "Fields", table(["array", "field", "dtype", "shape", "codec"], rows))


def _steps(
    st: Stored, against: Path | None, compute: bool, per_class: int, predictions: Path | None
) -> list[Callable[[], list[Section]]]:
    """The report's parts, each a call that makes its sections (one progress step each)."""
    picture = st.picture()
    steps: list[Callable[[], list[Section]]] = [lambda: [_counts(st)]]
    if picture is not None:
        steps.append(lambda: [pages.samples(st, picture, per_class)])
    steps.append(lambda: pages.of_fields(st))
    if isinstance(st.fields.get(picture or ""), Image):
        steps.append(lambda: [dupes.groups_section(st, compute)])
        if any(isinstance(f, Scores) for f in st.fields.values()):  # issue 39: quality scores
            steps.append(lambda: [issues.issues_section(st)])
        if predictions is not None:
            steps.append(lambda: [issues.labels_section(st, predictions)])
        if against is not None:
            steps.append(lambda: [dupes.leakage_section(st, against, compute)])
    steps.append(lambda: [rejects(st.root, st.m)])
    steps.append(lambda: [fields(st.m)])
    return steps


def write_report(
    root: Path,
    out: Path | None = None,
    against: Path | None = None,
    compute_hashes: bool = False,
    per_class: int = PER_CLASS,
    show_progress: bool = False,
    predictions: Path | None = None,
) -> Path:
    """Write the report to `out` (default ROOT/report.html) atomically; its path."""
    if not 1 <= per_class <= MAX_PER_CLASS:
        raise UsageError(f"--max-samples must be 1..{MAX_PER_CLASS}, not {per_class}")
    check_plot("prep report draws its charts with", "report")
    load_manifest(root)
    st = Stored(root)
    if against is not None:
        load_manifest(against)
        for where, one in ((root, st), (against, Stored(against))):
            if not isinstance(one.fields.get(one.picture() or ""), Image):
                raise PrepError(
                    f"--against compares the images of two datasets, and {where}'s samples have "
                    "no image field. HINT: prep report TRAIN --against VAL of two image datasets"
                )
    steps = _steps(st, against, compute_hashes, per_class, predictions)
    found: list[Section] = []
    bar = progress(len(steps), "part", "report", show_progress)
    for step in steps:
        found += step()
        bar.update(1)
    bar.close()
    on_disk = sum(f.bytes for s in st.m.shards for f in s.files.values())
    made = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    lead = [header(root, st.m), f"{mb(on_disk)} on disk; report made {made}"]
    text = page(f"prep report: {root.resolve().name}", lead, found)
    out = root / REPORT if out is None else out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, text)
    except OSError as e:
        raise PrepError(
            f"cannot write {out} ({e.strerror or e}). HINT: --out a writable path"
        ) from e
    return out
