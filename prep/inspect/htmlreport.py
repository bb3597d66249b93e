"""prep report: one self-contained HTML page about a packed dataset (prep.inspect.html), its
sections chosen by the dataset's kind (PAGES), then the rejects, and for pictures the
near-duplicates and, with `against`, the train/val leakage.

The folder is opened through the loaders' checks first (load_manifest: a damaged dataset is
one FormatError line); the page is written to a new temp file and renamed, so a report is
never half written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loaders.format import Manifest, load_manifest
from prep.inspect import dupepage, imagepage, kindpages, sections
from prep.inspect.html import Section, page
from prep.run.errors import PrepError, UsageError
from prep.run.files import atomic_write_text
from prep.run.guard import REPORT

PER_CLASS = 8  # grid samples a class, by default
MAX_PER_CLASS = 256

Page = Callable[[Path, Manifest, int], list[Section]]
PAGES: dict[str, Page] = {
    "images": imagepage.image_kind,
    "samples": imagepage.samples_kind,
    "volumes": kindpages.volume_kind,
    "table": kindpages.table_kind,
    "tokens": kindpages.token_kind,
}
PICTURES = ("images", "samples")  # kinds with perceptual hashes: near-duplicates and leakage


def _steps(
    root: Path, m: Manifest, against: Path | None, compute: bool, per_class: int
) -> list[Callable[[], list[Section]]]:
    """The report's parts, each a call that makes its sections (one progress step each)."""
    from loaders.read.store import ShardStore

    steps: list[Callable[[], list[Section]]] = [lambda: PAGES[m.kind](root, m, per_class)]
    if m.kind in PICTURES and imagepage.pictures(ShardStore(root, m.kind)) is not None:
        store = ShardStore(root, m.kind)
        steps.append(lambda: [dupepage.dupes(root, store, compute)])
        if against is not None:
            steps.append(lambda: [dupepage.leakage(root, store, against, compute)])
    steps.append(lambda: [sections.rejects(root, m)])
    if m.kind != "samples":  # samples pages list their fields already
        steps.append(lambda: [sections.fields(m)])
    return steps


def build(
    root: Path,
    against: Path | None = None,
    compute_hashes: bool = False,
    per_class: int = PER_CLASS,
    show_progress: bool = False,
) -> str:
    """The report's HTML. `against`: a second dataset of the same kind (val) whose samples
    are looked up among `root`'s (train); `compute_hashes`: hash a dataset packed before prep
    stored perceptual hashes, from its stored pixels; `per_class`: grid samples a class."""
    if not 1 <= per_class <= MAX_PER_CLASS:
        raise UsageError(f"--max-samples must be 1..{MAX_PER_CLASS}, not {per_class}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PrepError(
            "prep report draws its charts with matplotlib, which is not installed. "
            "HINT: pip install 'prep[report]'"
        ) from None
    m = load_manifest(root)
    if against is not None:
        other = load_manifest(against)
        if m.kind not in PICTURES or other.kind != m.kind:
            raise PrepError(
                f"--against compares two image or samples datasets; {root} holds {m.kind} and "
                f"{against} {other.kind}. HINT: prep report TRAIN --against VAL of one kind"
            )
        _check_pictures(root, m)
    from prep.run.parallel import progress

    steps = _steps(root, m, against, compute_hashes, per_class)
    found: list[Section] = []
    bar = progress(len(steps), "part", "report") if show_progress else None
    for step in steps:
        found += step()
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    title = f"prep report: {root.resolve().name}"
    return page(title, sections.lead(root, m), found)


def _check_pictures(root: Path, m: Manifest) -> None:
    """--against looks for near twins of pictures: a samples dataset without an image field
    (audio, arrays) has none to compare."""
    from loaders.read.store import ShardStore

    if imagepage.pictures(ShardStore(root, m.kind)) is None:
        raise PrepError(
            f"--against compares images, and {root}'s samples have no image field. "
            "HINT: leave out --against for this dataset"
        )


def write_report(
    root: Path,
    out: Path | None = None,
    against: Path | None = None,
    compute_hashes: bool = False,
    per_class: int = PER_CLASS,
    show_progress: bool = False,
) -> Path:
    """Write the report to `out` (default ROOT/report.html, a file of the dataset's that
    `prep pack --overwrite` replaces with it) and return its path. The page goes to a new temp
    file and is renamed over `out`: a link the dataset ships, at either name, is replaced,
    never written through."""
    text = build(root, against, compute_hashes, per_class, show_progress)
    out = root / REPORT if out is None else out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, text)
    except OSError as e:
        raise PrepError(
            f"cannot write {out} ({e.strerror or e}). HINT: --out a writable path"
        ) from e
    return out
