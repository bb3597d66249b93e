"""`prep dupes`: a packed dataset's near-duplicate groups, or its leakage into another one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from prep.media.image.near import DEFAULT_DISTANCE
from prep.run.errors import UsageError


def dupes(
    root: Annotated[Path, typer.Argument(help="A packed dataset with an image field.")],
    against: Annotated[
        Optional[Path],
        typer.Option(help="Another packed dataset (val, test): list ROOT x AGAINST pairs instead."),
    ] = None,
    max_distance: Annotated[
        int,
        typer.Option(
            help="The most bits of 64 two perceptual hashes may differ in, 0..32. "
            f"(default: {DEFAULT_DISTANCE})",
            show_default=False,
        ),
    ] = DEFAULT_DISTANCE,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON, for scripts.")] = False,
    compute: Annotated[
        bool,
        typer.Option("--hash", help="A dataset packed without hashes: compute them from pixels."),
    ] = False,
    split: Annotated[
        Optional[str], typer.Option(help="Only this split of ROOT (packed with --val-fraction).")
    ] = None,
    against_split: Annotated[
        Optional[str],
        typer.Option(help="Only this split of AGAINST (default AGAINST: ROOT itself)."),
    ] = None,
) -> None:
    """Near-duplicate groups of a dataset's images (perceptual hash within --max-distance bits,
    or the same stored pixels; a group across splits is marked), or with --against the pairs
    leaking between two datasets. Indices count within --split / --against-split, as
    SampleDataset(root, split=...) does.

    Example: prep dupes data/packed/train --against data/packed/val --max-distance 6 --json

    Example: prep dupes data/packed --split train --against-split val
    """
    from prep.inspect.dupes import dataset_hashes, dupe_groups, leakage

    if not 0 <= max_distance <= 32:
        raise UsageError(f"--max-distance {max_distance} must be 0..32")
    against = _other(root, against, split, against_split)
    h = dataset_hashes(root, compute, split)
    if against is None:
        groups = dupe_groups(h, max_distance)
        doc: dict[str, Any] = {"root": _named(root, split), "samples": len(h)}
        doc["max_distance"] = max_distance
        doc["groups"] = [vars(g) | {"splits": h.splits_of(g.members)} for g in groups]
        typer.echo(json.dumps(doc, indent=1) if as_json else _groups_text(doc))
        return
    other = dataset_hashes(against, compute, against_split)
    pairs = [
        {"index": i, "path": h.paths[i], "against_index": j, "against_path": other.paths[j]}
        | {"distance": d}
        for i, j, d in leakage(h, other, max_distance)
    ]
    doc = {"root": _named(root, split), "against": _named(against, against_split)}
    doc["samples"] = len(h)
    doc |= {"against_samples": len(other), "max_distance": max_distance, "pairs": pairs}
    typer.echo(json.dumps(doc, indent=1) if as_json else _pairs_text(doc))


def _other(root: Path, against: Path | None, split: str | None, other: str | None) -> Path | None:
    """The dataset to compare ROOT with (ROOT itself when only --against-split is given), or
    None; a UsageError where every sample would be its own twin."""
    if against is None and other is not None:
        against = root
    same = against is not None and against.resolve() == root.resolve()
    if same and (split is None or other is None or split == other):
        raise UsageError(
            f"{root} against itself. HINT: name two splits of it (--split train "
            "--against-split val), or run prep dupes ROOT alone for its groups"
        )
    return against


def _named(root: Path, split: str | None) -> str:
    return str(root) if split is None else f"{root} [{split}]"


def _groups_text(doc: dict[str, Any]) -> str:
    groups = doc["groups"]
    n = sum(len(g["members"]) for g in groups)
    lines = [
        f"{doc['root']}: {len(groups)} groups of near-duplicates ({n} of {doc['samples']} "
        f"samples) within {doc['max_distance']} bits; the first of each is the one "
        "prep pack --drop-dupes keeps"
    ]
    for k, g in enumerate(groups, 1):
        across = f" (across splits {', '.join(g['splits'])})" if len(g["splits"]) > 1 else ""
        lines.append(f"group {k}:{across}")
        for i, path, d in zip(g["members"], g["paths"], g["distances"], strict=True):
            lines.append(f"  {i:>8}  {d:>2} bits  {path}")
    return "\n".join(lines)


def _pairs_text(doc: dict[str, Any]) -> str:
    pairs = doc["pairs"]
    leaked = len({p["against_index"] for p in pairs})
    share = leaked / doc["against_samples"] if doc["against_samples"] else 0.0
    lines = [
        f"{doc['against']}: {leaked} of {doc['against_samples']} samples ({share:.1%}) have a "
        f"near-duplicate in {doc['root']} within {doc['max_distance']} bits ({len(pairs)} pairs)"
    ]
    lines += [f"  {p['against_path']}  ~  {p['path']}  ({p['distance']} bits)" for p in pairs]
    return "\n".join(lines)
