"""`prep issues`: the samples a dataset's quality scores flag (loaders.fields.scores), each with
its score and source, worst first within each issue.

>>> found = Issues(["blur"], np.array([[0.1], [0.9], [0.05]], np.float32),
...                np.array([[True], [False], [True]]), ["a.jpg", "b.jpg", "c.jpg"])
>>> [(r["index"], r["source"]) for r in found.records(["blur"])]
[(2, 'c.jpg'), (0, 'a.jpg')]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Label
from loaders.fields.scores import (
    OUTLIER_FRACTION,
    SHAPE_THRESHOLDS,
    Scores,
    embedding,
    issue_table,
    outlier_scores,
    parse_kinds,
)
from prep.inspect.html import Section, esc, grid, para, table
from prep.inspect.pages import thumbs
from prep.inspect.stored import Stored
from prep.run.errors import PrepError

WORST_SHOWN = 8  # thumbnails an issue on the report's page


@dataclass
class Issues:
    """Every issue's (N, K) scores and flags, in SampleDataset's order (of one split)."""

    names: list[str]
    scores: np.ndarray  # float32 (N, K), low is bad
    flags: np.ndarray  # bool (N, K)
    paths: list[str]  # each sample's source ("#i" without one)
    thresholds: tuple[float, ...] = ()

    def kinds(self, text: str | None) -> list[str]:
        """--kind as issue names (None: all); PrepError naming the ones there are."""
        try:
            return parse_kinds(text or "all", self.names)
        except ValueError as e:
            raise PrepError(f"--kind {text}: {e}") from None

    def records(self, kinds: list[str]) -> list[dict[str, Any]]:
        """One record a flag: {"index", "source", "kind", "score"}, by issue, worst first."""
        out = []
        for kind in kinds:
            k = self.names.index(kind)
            hit = np.flatnonzero(self.flags[:, k])
            for i in hit[np.argsort(self.scores[hit, k], kind="stable")].tolist():
                score = round(float(self.scores[i, k]), 4)
                out.append({"index": i, "source": self.paths[i], "kind": kind, "score": score})
        return out

    def counts(self) -> dict[str, int]:
        return {n: int(c) for n, c in zip(self.names, self.flags.sum(axis=0).tolist(), strict=True)}


def dataset_issues(
    root: str | Path,
    split: str | None = None,
    outliers: float = OUTLIER_FRACTION,
    embed: str | None = None,
) -> Issues:
    """The issues of the dataset at `root`, the top `outliers` of its samples (0: none) by their
    embedding's kNN distance among them (the pHash bits and colour statistics, or `embed`'s
    pooled features: prep.inspect.embed); PrepError where it has no (sound) scores."""
    root = Path(root)
    if not (root / "manifest.json").is_file():
        raise PrepError(f"{root} is not a packed dataset. HINT: pass the OUT of a prep command")
    st = Stored(root, split=split)
    name = next((n for n, f in st.fields.items() if isinstance(f, Scores)), None)
    if name is None:
        raise PrepError(
            f"{root} has no quality scores. HINT: pack it with prep pack (scores are on unless "
            "--no-quality)"
        )
    field = st.fields[name]
    assert isinstance(field, Scores)
    values = st.column(name).reshape(-1, len(field.names))
    bad = field.problems(name, {name: values})
    if bad:
        raise PrepError(f"{root}: {bad[0]}. HINT: run prep verify {root}, then repack")
    quality = st.m.extra.get("quality")
    ref = quality.get("shape") if isinstance(quality, dict) else None
    hw = st.column("orig_size") if ref is not None and "orig_size" in st.m.arrays else None
    far = None
    if outliers > 0 and embed is not None:
        from prep.inspect.embed import features

        far = outlier_scores(features(root, embed, split))
    elif outliers > 0 and "phash" in st.m.arrays and "colour" in st.m.arrays:
        far = outlier_scores(embedding(st.column("phash"), st.column("colour")))
    names, scores, flags = issue_table(field, values, hw, ref, far, outliers)
    thresholds = field.thresholds + (SHAPE_THRESHOLDS if hw is not None else ())
    thresholds += (outliers,) if far is not None else ()
    return Issues(names, scores, flags, st.sources(), thresholds)


def issues_text(found: Issues, kinds: list[str], shown: int) -> str:
    """Each issue's count and threshold, then its `shown` worst samples: index, score, source."""
    lines = []
    records = found.records(kinds)
    for kind in kinds:
        k = found.names.index(kind)
        mine = [r for r in records if r["kind"] == kind]
        lines.append(
            f"{kind}: {len(mine)} of {len(found.paths)} flagged "
            f"(score under {found.thresholds[k]:.3g})"
        )
        lines += [f"  {r['index']:>8}  {r['score']:.3f}  {r['source']}" for r in mine[:shown]]
        if len(mine) > shown:
            lines.append(f"  ... {len(mine) - shown} more (--limit, or --json for all)")
    return "\n".join(lines)


def issues_section(st: Stored) -> Section:
    """prep report's page of the quality issues: counts per issue and class, then each issue's
    worst samples as thumbnails (their score and source under each)."""
    try:
        found = dataset_issues(st.root)
    except PrepError as e:
        return Section("issues", "Quality issues", para(str(e), "bad"))
    name, labels = st.labels()
    f = st.fields.get(name or "")
    classes = list(f.classes or []) if isinstance(f, Label) and labels is not None else []
    header = ["issue", "flagged", *classes]
    rows = []
    for k, issue in enumerate(found.names):
        hit = found.flags[:, k]
        per = [int((hit & (labels == c)).sum()) for c in range(len(classes))] if classes else []
        rows.append((issue, int(hit.sum()), *per))
    total = int(found.flags.any(axis=1).sum())
    body = para(
        f"{total:,} of {len(found.paths):,} samples flagged (scores in [0, 1], low is bad; "
        "prep issues ROOT lists them, exclude='issues:...' skips them)",
        "bad" if total else "good",
    )
    body += table(header, rows)
    picture = st.picture()
    for issue in found.names:
        worst = found.records([issue])[:WORST_SHOWN]
        if not worst or picture is None:
            continue
        said = [f"{r['index']} {r['score']:.2f}" for r in worst]
        tiles = thumbs(st, picture, [int(r["index"]) for r in worst], said)
        body += f"<h3>{esc(issue)}</h3>" + grid([t for one in tiles for t in one])
    return Section("issues", "Quality issues", body, wide=True)


def labels_section(st: Stored, predictions: Path) -> Section:
    """prep report's likely label errors (prep labels) beside their images: index, the given
    and the suggested class under each, the least likely given label first."""
    from prep.inspect.labels import label_records

    try:
        found = label_records(st.root, str(predictions))
    except (PrepError, ValueError) as e:
        return Section("labels", "Likely label errors", para(str(e), "bad"))
    head = para(
        f"{len(found):,} of {len(st):,} samples' labels are likely wrong (confident learning "
        f"on {predictions.name}; prep labels lists them)",
        "bad" if found else "good",
    )
    shown = found[: WORST_SHOWN * 4]
    said = [f"{r['index']} {r['given']} -> {r['suggested']}" for r in shown]
    picture = st.picture()
    tiles = thumbs(st, picture, [int(r["index"]) for r in shown], said) if picture else []
    body = head + grid([t for one in tiles for t in one])
    return Section("labels", "Likely label errors", body, wide=True)
