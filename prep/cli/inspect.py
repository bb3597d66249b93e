"""The commands that look at a packed dataset: the work is in prep.inspect, imported when a
command runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from prep.cli.options import QuietOpt, reading
from prep.media.image.near import DEFAULT_DISTANCE
from prep.run.errors import PrepError, UsageError


def info(
    root: Annotated[Path, typer.Argument(help="A packed dataset folder.")],
    batch_size: Annotated[int, typer.Option(help="Batch size for the RAM column.")] = 256,
) -> None:
    """Counts, fields, shapes, dtypes, bytes on disk and RAM per batch of a packed dataset.

    Example: prep info data/demo-packed --batch-size 128
    """
    from prep.inspect.report import info as describe

    with reading(root):
        typer.echo(describe(root, batch_size))


def verify(
    root: Annotated[Path, typer.Argument(help="A packed dataset folder.")],
    limit: Annotated[
        Optional[int], typer.Option(help="Only the shards holding the first N samples.")
    ] = None,
) -> None:
    """Recompute every checksum and shape; exit 1 naming each bad file.

    Example: prep verify data/demo-packed
    """
    from prep.inspect.report import verify as check

    with reading(root):
        manifest, problems = check(root, limit)
    for p in problems:
        typer.echo(f"bad: {p}", err=True)
    if problems:
        raise PrepError(
            f"{len(problems)} problems in {root}. HINT: restore the files named above, or pack "
            "the dataset again (--overwrite)"
        )
    files = sum(len(s.files) for s in manifest.shards)
    typer.echo(f"{root}: ok, {manifest.num_samples} samples, {files} files verified")


def preview(
    root: Annotated[Path, typer.Argument(help="A packed dataset folder.")],
    size: Annotated[
        Optional[int], typer.Option("--size", "-s", help="Stored size in px (default: smallest).")
    ] = None,
    count: Annotated[
        int, typer.Option("--count", "--limit", "-n", help="Tiles: the first N samples.")
    ] = 64,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Image to write (.png; .jpg is smaller).")
    ] = Path("sheet.png"),
    columns: Annotated[
        Optional[int], typer.Option(help="Tiles per row (default: a square sheet).")
    ] = None,
    masks: Annotated[
        bool, typer.Option("--masks/--no-masks", help="Draw masks, boxes and points on tiles.")
    ] = True,
) -> None:
    """A contact sheet of packed samples: index and class under each tile, masks, boxes and
    labels drawn on them; video as frames, volumes as middle slices. A dataset without
    pictures (a table, tokens) prints its first rows instead.

    Shows a wrong rotation, a bad crop or a misaligned mask at a glance.

    Example: prep preview data/demo-packed --size 128 --count 32 --output sheet.png
    """
    from loaders.fields import declared
    from loaders.fields.checks import load_manifest
    from loaders.remote import url_of
    from prep.inspect.preview import preview as sheet
    from prep.inspect.preview import rows
    from prep.inspect.stored import makes_pictures

    if url_of(root) is not None:
        raise PrepError(
            f"{url_of(root)}: prep preview reads a dataset folder, not a URL. HINT: `prep verify "
            "URL` checks it; copy it to a folder to preview it"
        )
    with reading(root):
        m = load_manifest(root)  # checked first: a bad header or offset would be misread
        if not any(makes_pictures(f) for f in declared(m).values()):
            typer.echo(rows(root, min(count, 20)))
            return
        typer.echo(sheet(root, size, count, output, columns, masks).line())


def tune(
    root: Annotated[Path, typer.Argument(help="A packed image dataset folder.")],
    size: Annotated[
        Optional[int], typer.Option("--size", "-s", help="Stored size in px (default: smallest).")
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="Samples per batch.")] = 64,
    seconds: Annotated[float, typer.Option(help="Timed seconds per worker count.")] = 3.0,
    workers: Annotated[
        Optional[str],
        typer.Option(help="Worker counts to try, e.g. 0,2,4 (default: 0, 1, 2, ... cores)."),
    ] = None,
    prefetch_factor: Annotated[int, typer.Option(help="Batches in flight per worker.")] = 2,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N samples.")] = None,
    plot: Annotated[
        Optional[Path], typer.Option(help="Also draw samples/s against workers to this PNG.")
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Time the real loader at 0, 1, 2, ... workers and recommend a worker count.

    Runs make_loader over ImageShardDataset for --seconds per worker count and prints samples/s,
    CPU use and the RAM of batches in flight (workers x prefetch x batch bytes).

    Example: prep tune data/demo-packed --size 256 --batch-size 64 --plot tune.png
    """
    import prep.inspect.tune as tuning

    try:
        counts = [int(w) for w in workers.split(",") if w.strip()] if workers else None
    except ValueError:
        raise typer.BadParameter(f"{workers!r} is not a list of counts, e.g. 0,2,4") from None
    if plot is not None:
        tuning.check_plot()  # matplotlib is the [plot] extra: fail before the timed run
    result = tuning.tune(root, size, batch_size, seconds, counts, prefetch_factor, limit, not quiet)
    typer.echo(f"{result.table()}\n{result.advice()}")
    if plot is not None:
        tuning.plot(result, plot)
        typer.echo(f"plot: {plot}")


def report(
    root: Annotated[Path, typer.Argument(help="A packed dataset folder.")],
    against: Annotated[
        Optional[Path],
        typer.Option(help="A second dataset (val): list its samples with a near twin in ROOT."),
    ] = None,
    hash: Annotated[
        bool,
        typer.Option("--hash", help="Hash a dataset packed before prep stored perceptual hashes."),
    ] = False,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            "-o",
            help="HTML file to write (default ROOT/report.html, which --overwrite replaces with "
            "the dataset); a path elsewhere for a dataset you cannot write into.",
        ),
    ] = None,
    max_samples: Annotated[
        int, typer.Option("--max-samples", "-n", help="Grid samples a class, picked at random.")
    ] = 8,
    quiet: QuietOpt = False,
    predictions: Annotated[
        Optional[Path],
        typer.Option(help="Class probabilities (.npy, prep labels): show the likely label errors."),
    ] = None,
) -> None:
    """One self-contained HTML page about a packed dataset; prints its path.

    Counts per split and class, source sizes, rejects by reason, pixel statistics.
    A grid of samples per class (class names, masks and boxes drawn; video frames, volume
    slices), near-duplicates (a group across splits marked), and each field kind's view:
    tokens, table columns, clip lengths, text values.
    With --against VAL: the samples of VAL with a near twin in ROOT (leakage).
    Images are embedded, charts inline: it opens from a file:// URL, offline.

    Example: prep report data/demo-packed --max-samples 4
    """
    from prep.inspect.htmlreport import write_report

    with reading(root):
        path = write_report(root, out, against, hash, max_samples, not quiet, predictions)
    typer.echo(str(path))


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
    from prep.inspect.dupes import dataset_hashes, dupe_groups

    if not 0 <= max_distance <= 32:
        raise UsageError(f"--max-distance {max_distance} must be 0..32")
    if against is None and against_split is not None:  # ROOT's other split
        against = root
    same = against is not None and against.resolve() == root.resolve()
    if same and (split is None or against_split is None or split == against_split):
        raise UsageError(
            f"{root} against itself. HINT: name two splits of it (--split train "
            "--against-split val), or run prep dupes ROOT alone for its groups"
        )
    h = dataset_hashes(root, compute, split)
    doc: dict[str, Any] = {"root": _named(root, split)}
    if against is None:
        groups = dupe_groups(h, max_distance)
        doc |= {"samples": len(h), "max_distance": max_distance}
        doc["groups"] = [vars(g) | {"splits": h.splits_of(g.members)} for g in groups]
        typer.echo(json.dumps(doc, indent=1) if as_json else _groups_text(doc))
        return
    doc["against"] = _named(against, against_split)
    doc |= _leaks(h, dataset_hashes(against, compute, against_split), max_distance)
    typer.echo(json.dumps(doc, indent=1) if as_json else _pairs_text(doc))


def _leaks(h: Any, other: Any, max_distance: int) -> dict[str, Any]:
    """The pairs of `h` and `other` (dataset_hashes) within `max_distance` bits, as printed."""
    from prep.inspect.dupes import leakage

    pairs = [
        {"index": i, "path": h.paths[i], "against_index": j, "against_path": other.paths[j]}
        | {"distance": d}
        for i, j, d in leakage(h, other, max_distance)
    ]
    n = {"samples": len(h), "against_samples": len(other), "max_distance": max_distance}
    return n | {"pairs": pairs}


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
        members = zip(g["members"], g["paths"], g["distances"], strict=True)
        lines += [f"group {k}:{across}", *(f"  {i:>8}  {d:>2} bits  {p}" for i, p, d in members)]
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
