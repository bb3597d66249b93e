"""`prep import SOURCE ...`: one Typer sub-app, a command per source shape (see _add)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import typer

from prep.cli.options import command, friendly
from prep.kinds.importers.config import CocoConfig, HFConfig, PairsConfig, WdsConfig, unquoted
from prep.run.config import RunConfig
from prep.run.profile import IMAGE_STAGES

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
    arguments: tuple[str, ...] = ("src", "out"),
    pattern: bool = False,
) -> None:
    """Command `prep import NAME` over `runner`; `pattern`: SRC is a brace pattern."""
    cmd = command(config, runner, IMAGE_STAGES, doc, arguments=arguments)
    if pattern:
        cmd = _one_pattern(cmd)
    app.command(name, context_settings={"allow_extra_args": pattern})(friendly(cmd))


def _one_pattern(cmd: Any) -> Any:
    """More arguments than SRC OUT: an unquoted brace pattern the shell expanded; one line."""

    @functools.wraps(cmd)
    def checked(ctx: typer.Context, **values: Any) -> None:
        if ctx.args:
            raise unquoted(f"{len(ctx.args) + 2} arguments where SRC OUT are 2")
        cmd(**values)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    ctx = inspect.Parameter("ctx", kind, annotation=typer.Context)
    params = [ctx, *inspect.signature(cmd).parameters.values()]
    checked.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return checked


COCO_HELP = """\
Import a COCO instances JSON and its images: image, boxes, labels, iscrowd, area, image_id.

Boxes are float32 (x0, y0, x1, y1) in the stored image's pixels: resized, cropped and padded
with it (a box cut by the crop is clipped; one left with no area is dropped and counted).

Example: prep import coco instances_train2017.json train2017/ packed/coco --sizes 512 --mode keep
"""

PAIRS_HELP = """\
Import image-caption pairs from a .csv, .jsonl or .parquet: image, caption (and tokens).

Example: prep import pairs captions.parquet packed/pairs --image-column path --text-column caption
"""

HF_HELP = """\
Import a Hugging Face dataset from disk (save_to_disk, or Parquet files), read with pyarrow.

Features become fields: Image -> image, ClassLabel -> label with its names, Value -> scalar,
text or bytes, List/Sequence -> ragged array (JSON for strings), Array2D-5D -> array, a dict ->
a field a key. Each split gets its own shards; the manifest records the splits and features.

Example: prep import hf ~/hf/my_dataset packed/hf --sizes 224
"""

WDS_HELP = """Import WebDataset tar shards: samples grouped by key, a field an extension.

.jpg/.png/.webp -> the field image, .cls -> label, .txt -> text, .json -> JSON, .npy -> array,
other -> bytes, and __key__. A sample missing a field (--fields: which), with a member over
--max-member-mb, or in a truncated tar is a reject. Quote the pattern (the shell expands it).

Example: prep import webdataset 'shards/train-{000000..000099}.tar' packed/wds --sizes 224
"""

COCO_ARGUMENTS = ("src", "images", "out")  # COCO's IMAGES_DIR between SRC and OUT
_add("coco", CocoConfig, "prep.kinds.importers.coco:import_coco", COCO_HELP, COCO_ARGUMENTS)
_add("pairs", PairsConfig, "prep.kinds.importers.pairs:import_pairs", PAIRS_HELP)
_add("hf", HFConfig, "prep.kinds.importers.hf:import_hf", HF_HELP)
_add("webdataset", WdsConfig, "prep.kinds.importers.wds:import_webdataset", WDS_HELP, pattern=True)
