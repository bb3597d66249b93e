"""`prep issues` and `prep labels`: what is wrong with a packed dataset's data (issue 39); the work
is in prep.inspect.issues and prep.inspect.labels, imported when a command runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from prep.run.errors import PrepError, UsageError

RootArg = Annotated[Path, typer.Argument(help="A packed dataset folder.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON lines, one a flag, for scripts.")]
SplitOpt = Annotated[
    Optional[str],
    typer.Option(help="Only this split (indices count within it, as SampleDataset's)."),
]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", help="Samples shown per issue (text).")]


def issues(
    root: RootArg,
    kind: Annotated[
        Optional[str],
        typer.Option(
            help="Only these issues, comma-separated: blur,dark,bright,low_info,grayscale,"
            "odd_size,odd_aspect,outlier (default: all)."
        ),
    ] = None,
    outliers: Annotated[
        float,
        typer.Option(
            help="The share of samples flagged as outliers: the farthest from their 5 nearest "
            "by pHash bits and colour statistics (0: none)."
        ),
    ] = 0.01,
    embed: Annotated[
        Optional[str],
        typer.Option(
            metavar="MODEL",
            help="Outliers by this local model's pooled features instead: a TorchScript file "
            "(torch.jit.save), a pickled nn.Module (torch.save(model); runs code from the "
            "file), or torchvision.NAME:FILE / timm.NAME:FILE weights.",
        ),
    ] = None,
    as_json: JsonOpt = False,
    split: SplitOpt = None,
    limit: LimitOpt = 10,
) -> None:
    """The samples prep pack's quality scores flag: each issue's count, then its worst samples
    (index, score, source). Scores are in [0, 1], low is bad (docs/quality.md).

    Example: prep issues data/demo-packed --kind blur,dark

    Example: prep issues data/demo-packed --json > issues.jsonl

    Example: prep issues data/demo-packed --kind outlier --embed features.pt
    """
    from prep.inspect.issues import dataset_issues, issues_text

    if not 0 <= outliers < 1:
        raise UsageError(f"--outliers {outliers} must be in [0, 1): a share of the samples")
    found = dataset_issues(root, split, outliers, embed)
    kinds = found.kinds(kind)
    if as_json:
        for record in found.records(kinds):
            typer.echo(json.dumps(record))
        return
    typer.echo(issues_text(found, kinds, limit))


def labels(
    root: RootArg,
    predictions: Annotated[
        Path,
        typer.Option(
            help="A .npy of out-of-sample class probabilities (N, K), one row per sample in the "
            "dataset's order (cross-validation: examples/train_classifier.py --cross-val 5)."
        ),
    ],
    as_json: JsonOpt = False,
    split: SplitOpt = None,
    limit: LimitOpt = 20,
) -> None:
    """Likely label errors by confident learning (cleanlab's find_label_issues, its defaults):
    index, given and suggested class, their probabilities, source; the least likely first.

    Example: prep labels data/demo-packed --predictions preds.npy
    """
    from prep.inspect.labels import label_records

    try:
        records = label_records(root, str(predictions), split)
    except ValueError as e:
        raise PrepError(f"{e}. HINT: pass --predictions of this dataset (its split)") from None
    if as_json:
        for record in records:
            typer.echo(json.dumps(record))
        return
    typer.echo(_labels_text(records, limit))


def _labels_text(records: list[dict[str, Any]], shown: int) -> str:
    lines = [f"{len(records)} likely label errors (confident learning)"]
    for r in records[:shown]:
        lines.append(
            f"  {r['index']:>8}  {r['given']} ({r['p_given']:.2f}) -> {r['suggested']} "
            f"({r['p_suggested']:.2f})  {r['source']}"
        )
    if len(records) > shown:
        lines.append(f"  ... {len(records) - shown} more (--limit, or --json for all)")
    return "\n".join(lines)
