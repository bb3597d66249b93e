"""prep report: one self-contained HTML page about a packed dataset, its sections asked of its
fields: the counts by label, the grid of its picture field with the fields drawn on it, the
sections of its field kinds (prep.inspect.pages), the near-duplicates of an image field (and,
with `against`, the train/val leakage), the rejects and the arrays. The folder is opened
through the loaders' checks first (load_manifest: a damaged dataset is one FormatError line)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loaders.fields import Image, Label, Labels
from loaders.fields.checks import load_manifest
from prep.inspect import dupes, pages, sections
from prep.inspect.html import Section, page
from prep.inspect.stored import Stored
from prep.run.errors import PrepError, UsageError
from prep.run.files import atomic_write_text
from prep.run.guard import REPORT
from prep.run.parallel import progress

PER_CLASS = 8  # grid samples a class, by default
MAX_PER_CLASS = 256


def _counts(st: Stored) -> Section:
    """Samples per split and class of its Label field, or objects per class of its Labels."""
    name, labels = st.labels()
    f = st.fields.get(name or "")
    names = list(f.classes or []) if isinstance(f, Label | Labels) else []
    what = "objects" if isinstance(f, Labels) else "samples"
    return sections.counts(st.m, labels, what, names)


def _steps(
    st: Stored, against: Path | None, compute: bool, per_class: int
) -> list[Callable[[], list[Section]]]:
    """The report's parts, each a call that makes its sections (one progress step each)."""
    picture = st.picture()
    steps: list[Callable[[], list[Section]]] = [lambda: [_counts(st)]]
    if picture is not None:
        steps.append(lambda: [pages.samples(st, picture, per_class)])
    steps.append(lambda: pages.of_fields(st))
    if isinstance(st.fields.get(picture or ""), Image):
        steps.append(lambda: [dupes.groups_section(st, compute)])
        if against is not None:
            steps.append(lambda: [dupes.leakage_section(st, against, compute)])
    steps.append(lambda: [sections.rejects(st.root, st.m)])
    steps.append(lambda: [sections.fields(st.m)])
    return steps


def _opened(root: Path, against: Path | None, per_class: int) -> Stored:
    """The dataset, its options and matplotlib checked before any section is made."""
    if not 1 <= per_class <= MAX_PER_CLASS:
        raise UsageError(f"--max-samples must be 1..{MAX_PER_CLASS}, not {per_class}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PrepError(
            "prep report draws its charts with matplotlib, which is not installed. "
            "HINT: pip install 'prep[report]'"
        ) from None
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
    return st


def write_report(
    root: Path,
    out: Path | None = None,
    against: Path | None = None,
    compute_hashes: bool = False,
    per_class: int = PER_CLASS,
    show_progress: bool = False,
) -> Path:
    """Write the report to `out` (default ROOT/report.html) through a new temp file renamed over
    it (a link the dataset ships is replaced, never written through); its path. `against`: a
    second image dataset (val) whose samples are looked up among `root`'s (train);
    `compute_hashes`: hash the stored pixels of a dataset packed without perceptual hashes."""
    st = _opened(root, against, per_class)
    steps = _steps(st, against, compute_hashes, per_class)
    found: list[Section] = []
    bar = progress(len(steps), "part", "report") if show_progress else None
    for step in steps:
        found += step()
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    text = page(f"prep report: {root.resolve().name}", sections.lead(root, st.m), found)
    out = root / REPORT if out is None else out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, text)
    except OSError as e:
        raise PrepError(
            f"cannot write {out} ({e.strerror or e}). HINT: --out a writable path"
        ) from e
    return out
