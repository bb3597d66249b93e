"""The commands that grow or reshape a packed dataset without decoding (merge, remove, compact,
log, card, export): the work is in prep.kinds.grow and prep.run, imported when a command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prep.run.errors import UsageError


def log_(root: Annotated[Path, typer.Argument(help="A packed dataset folder.")]) -> None:
    """The dataset's versions, newest first: what each `version=` of the loaders reads.

    Example: prep log data/demo-packed
    """
    from prep.kinds.grow.log import log

    typer.echo(log(root))


def merge(
    paths: Annotated[list[Path], typer.Argument(help="Datasets to merge, then OUT.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an OUT that prep wrote.")] = False,
) -> None:
    """Datasets with the same fields into one, without decoding: shards hard-linked, class maps
    unified (labels remapped), each `source` prefixed with its dataset's folder name.

    Example: prep merge data/pets-a data/pets-b data/pets
    """
    from prep.kinds.grow.merge import merge as merge_datasets

    if len(paths) < 3:
        raise UsageError("prep merge A B ... OUT: two datasets or more, then OUT")
    typer.echo(merge_datasets(paths[:-1], paths[-1], overwrite).line())


def card(root: Annotated[Path, typer.Argument(help="A packed dataset folder.")]) -> None:
    """Write the dataset card README.md beside the manifest (Hugging Face layout); what you
    wrote outside prep's block, and the license you set, are kept.

    Example: prep card data/demo-packed
    """
    from prep.run.card import write_card
    from prep.run.guard import locked

    with locked(root.absolute()):
        typer.echo(f"wrote {write_card(root)}")


def remove(
    root: Annotated[Path, typer.Argument(help="A packed dataset folder.")],
    ids: Annotated[Path, typer.Option(help="A file: a sample index or a source path a line.")],
) -> None:
    """Hide samples (a tombstone list in the manifest) until `prep compact` drops them.

    Example: prep remove data/pets --ids mislabelled.txt
    """
    from prep.kinds.grow.remove import remove as remove_samples

    typer.echo(remove_samples(root, ids).line())


def export(
    root: Annotated[Path, typer.Argument(help="A packed dataset folder.")],
    out: Annotated[Path, typer.Argument(help="A new folder for the exported files.")],
    to: Annotated[str, typer.Option(help="parquet (Hugging Face Features) | webdataset")],
) -> None:
    """The samples as Parquet files with Hugging Face Features, or WebDataset tars.

    Example: prep export data/demo-packed data/demo-parquet --to parquet
    """
    from prep.kinds.grow.export import export as export_dataset

    typer.echo(export_dataset(root, out, to).line())


def compact(
    root: Annotated[Path, typer.Argument(help="A packed dataset folder.")],
    shard_size: Annotated[
        Optional[int], typer.Option(help="Samples per shard (default: from the count).")
    ] = None,
    prune: Annotated[
        bool, typer.Option(help="Keep only the new version's files (older versions go).")
    ] = False,
    resume: Annotated[
        bool, typer.Option(help="Finish a killed compact (same options): its shards reused.")
    ] = False,
) -> None:
    """Rewrite many small shards (after appends) into shards of the target size, no decode.

    Example: prep compact data/pets --prune
    """
    from prep.kinds.grow.compact import compact as compact_dataset

    typer.echo(compact_dataset(root, shard_size, prune, resume).line())
