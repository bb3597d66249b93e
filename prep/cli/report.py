"""The `prep report` command (registered on the `prep` app by prep.cli.main); the work is in
prep.inspect.htmlreport, imported when the command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prep.cli.options import QuietOpt


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
    from prep.cli.inspect import reading
    from prep.inspect.htmlreport import write_report

    with reading(root):
        path = write_report(root, out, against, hash, max_samples, not quiet)
    typer.echo(str(path))
