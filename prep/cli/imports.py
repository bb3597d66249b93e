"""`prep import SOURCE ...`: one Typer sub-app, a command per source shape. prep.cli.main registers
it (and makes each command's errors one line). A command's module is imported only when it runs:
the CLI's start-up stays fast and never imports torch.

Adding a source: a config class (prep.kinds.importers.config), a runner `module:function` taking
(cfg, show_progress, profile) and returning a RunSummary, and an `_add` line below.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

import prep.cli.options as options
from prep.kinds.importers.config import CocoConfig, HFConfig, PairsConfig, WdsConfig
from prep.run.config import RunConfig

app = typer.Typer(
    help="Import data that sits in another format (COCO, image-text pairs, ...) as samples.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _add(
    name: str,
    config: type[RunConfig],
    runner: str,
    doc: str,
    arguments: tuple[str, ...] = (),
    pattern: bool = False,
) -> None:
    """Command `prep import NAME` over `runner`; `arguments`: config fields taken as positional
    arguments between SRC and OUT (COCO's IMAGES_DIR); `pattern`: SRC is a brace pattern."""

    def run(cfg: Any, quiet: bool, profile: bool) -> None:
        from prep.run.profile import IMAGE_STAGES, profile_table

        module, function = runner.split(":")
        summary = getattr(importlib.import_module(module), function)(cfg, not quiet, profile)
        typer.echo(summary.line())
        if summary.stages is not None:
            workers = min(cfg.n_jobs, max(1, summary.shards - summary.reused))
            typer.echo(profile_table(summary.stages, IMAGE_STAGES, workers))

    command = options.command(config, run)
    if arguments:
        _positional(command, config, arguments)
    if pattern:
        command = _one_pattern(command)
    command.__doc__ = doc
    app.command(name, context_settings={"allow_extra_args": pattern})(command)


def _one_pattern(command: Any) -> Any:
    """More arguments than SRC OUT: an unquoted brace pattern that the shell expanded into its
    names (shard-{000..009}.tar: ten). One line saying to quote it, not Click's box about an
    extra argument."""

    def checked(ctx: typer.Context, **values: Any) -> None:
        if ctx.args:
            from prep.kinds.importers.config import unquoted

            raise unquoted(f"{len(ctx.args) + 2} arguments where SRC OUT are 2")
        command(**values)

    params = list(inspect.signature(command).parameters.values())
    ctx = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )
    checked.__signature__ = inspect.Signature([ctx, *params])  # type: ignore[attr-defined]
    return checked


def _positional(command: Any, config: type[RunConfig], names: tuple[str, ...]) -> None:
    """Make the options `names` positional arguments, after SRC and before OUT."""
    params = list(command.__signature__.parameters.values())
    moved = []
    for name in names:
        old = next(p for p in params if p.name == name)
        params.remove(old)
        info = typer.Argument(help=config.__dataclass_fields__[name].metadata["help"])
        moved.append(old.replace(annotation=Annotated[Optional[Path], info]))
    at = next(i for i, p in enumerate(params) if p.name == "src") + 1
    params[at:at] = moved
    command.__signature__ = inspect.Signature(params)


_add(
    "coco",
    CocoConfig,
    "prep.kinds.importers.coco:import_coco",
    """Import a COCO instances JSON and its images: image, boxes, labels, iscrowd, area, image_id.

Boxes are float32 (x0, y0, x1, y1) in the stored image's pixels: resized, cropped and padded
with it (a box cut by the crop is clipped; one left with no area is dropped and counted).

Example: prep import coco instances_train2017.json train2017/ packed/coco --sizes 512 --mode keep
""",
    arguments=("images",),
)
_add(
    "pairs",
    PairsConfig,
    "prep.kinds.importers.pairs:import_pairs",
    """Import image-caption pairs from a .csv, .jsonl or .parquet: image, caption (and tokens).

Example: prep import pairs captions.parquet packed/pairs --image-column path --text-column caption
""",
)
_add(
    "hf",
    HFConfig,
    "prep.kinds.importers.hf:import_hf",
    """Import a Hugging Face dataset from disk (save_to_disk, or Parquet files), read with pyarrow.

Features become fields: Image -> image, ClassLabel -> label with its names, Value -> scalar,
text or bytes, List/Sequence -> ragged array (JSON for strings), Array2D-5D -> array, a dict ->
a field a key. Each split gets its own shards; the manifest records the splits and features.

Example: prep import hf ~/hf/my_dataset packed/hf --sizes 224
""",
)
_add(
    "webdataset",
    WdsConfig,
    "prep.kinds.importers.wds:import_webdataset",
    """Import WebDataset tar shards: samples grouped by key, a field an extension.

.jpg/.png/.webp -> the field image, .cls -> label, .txt -> text, .json -> JSON, .npy -> array,
other -> bytes, and __key__. A sample missing a field (--fields: which), with a member over
--max-member-mb, or in a truncated tar is a reject. Quote the pattern (the shell expands it).

Example: prep import webdataset 'shards/train-{000000..000099}.tar' packed/wds --sizes 224
""",
    pattern=True,
)
