"""Listing sound files: a folder (class sub-folders give labels, as for images), a CSV/JSONL
list with `path` and an optional `label` (prep.sources.images reads lists), or a folder
with `--labels FILE.csv`; per-clip `--targets FILE.csv` as volumes read them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from prep.run.errors import PrepError
from prep.run.inputs import walk
from prep.sources import targets as tg
from prep.sources.images import list_file, list_folder

# libsndfile's formats first, then what FFmpeg decodes (AAC, WMA, AMR, AC-3, Matroska audio).
AUDIO_EXTS = frozenset(
    ".wav .flac .ogg .oga .opus .mp3 .aiff .aif .aifc .au .caf .w64".split()  # noqa: SIM905
    + ".m4a .aac .wma .mka .webm .amr .ac3".split()  # noqa: SIM905
)
HINT = "a file's path under SRC or its stem (speech/a.wav or speech/a)"  # of a --targets row


@dataclass(frozen=True)
class Clip:
    """One input file: how rejects name it, where it is, its class and its target values."""

    rel: str
    path: Path
    label: int | None = None
    target: tuple[int | float, ...] = ()


@dataclass
class Listing:
    clips: list[Clip]
    classes: list[str] | None
    rejects: list[dict[str, Any]]
    targets: tg.Targets | None


def stem(rel: str) -> str:
    """`speech/a.wav` -> `speech/a`: a row of --labels or --targets may name either."""
    p = PurePosixPath(rel)
    return str(p.with_suffix("")) if p.suffix else rel


def _attach(
    table: tg.Targets, clips: list[Clip], seen: list[str]
) -> tuple[list[Clip], list[dict[str, Any]]]:
    """Each clip's row of `table` (by path or stem); a row naming none of `seen` stops the run."""
    keys = {k for rel in seen for k in (rel, stem(rel))}
    tg.check_rows(table, keys, "sound file", HINT)
    return tg.attach(table, clips, stem, "label" if _is_labels(table) else "target")


def _is_labels(table: tg.Targets) -> bool:
    return [c.name for c in table.columns] == ["label"]


def list_audio(src: Path, labels: Path | None, targets: Path | None, limit: int | None) -> Listing:
    """Every sound file of SRC in a fixed order, its label and targets, and the rejects."""
    if not src.exists():
        raise PrepError(f"{src} does not exist. HINT: pass a folder of sound files or a .csv list")
    if src.is_file() and src.suffix.lower() not in (".csv", ".jsonl"):
        raise PrepError(f"{src} is not a folder or a .csv/.jsonl list of sound files")
    if labels is not None and not src.is_file():
        # a folder's files, each labelled by its row of `labels` (a CSV of path, label)
        given = tg.read_targets(labels)
        if not _is_labels(given):
            raise PrepError(
                f"--labels {labels}: columns {[c.name for c in given.columns]} after the path. "
                "HINT: two columns, `path` (under SRC, or its stem) and `label`"
            )
        files, rejects = walk(src, AUDIO_EXTS)
        clips = [Clip(rel, path) for rel, path in files]
        kept, missing = _attach(given, clips, [c.rel for c in clips] + [r["path"] for r in rejects])
        col = given.columns[0]
        if col.classes is None and col.dtype.startswith("float"):
            raise PrepError(
                f"--labels {labels}: labels are class names or integer ids, not numbers"
            )
        clips = [Clip(c.rel, c.path, int(c.target[0])) for c in kept]
        classes, rejects = col.classes, rejects + missing
    else:  # every row of a list, not the first `limit`: --targets may name any
        listed = list_file(src) if src.is_file() else list_folder(src, AUDIO_EXTS, "sound file")
        items, classes, rejects = listed
        clips = [Clip(it.rel, it.path, it.label) for it in items]
    seen = [c.rel for c in clips] + [r["path"] for r in rejects]
    clips = clips[:limit]
    table = tg.read_targets(targets) if targets is not None else None
    if table is not None:
        clips, missing = _attach(table, clips, seen)
        rejects += missing
    rejects.sort(key=lambda r: r["path"])
    return Listing(clips, classes, rejects, table)
