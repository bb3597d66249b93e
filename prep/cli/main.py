"""The `prep` command line: the Typer app, its writing and import commands (made from their config
dataclasses), and `upgrade`; the other commands are in prep.cli.demo, prep.cli.inspect,
prep.cli.grow and prep.cli.quality. Each command is made, and its module imported, when first
asked for (a command line, --help, the docs): `prep pack` makes one. No torch imported here."""

from __future__ import annotations

import functools
import importlib
import inspect
from pathlib import Path
from typing import Annotated, Any

import typer

from prep.cli.group import HELP_WIDTH, Command, Group, Maker, lazy_group
from prep.cli.options import KIND, command, friendly
from prep.run.errors import UsageError
from prep.run.profile import IMAGE_STAGES, TEXT_STAGES
from prep.run.version import __version__

_typer = functools.partial(
    typer.Typer,
    cls=Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: prep.cli.group
    context_settings={"max_content_width": HELP_WIDTH},
)
# The commands, made when first asked for (prep.cli.group): in the order of --help.
COMMANDS: dict[str, Maker] = {}
IMPORTERS: dict[str, Maker] = {}
app = _typer(
    cls=lazy_group(COMMANDS),
    help="Pack raw images and text once, offline, into uint8 shards that `loaders` memory-maps.",
)


def _writer(
    name: str,
    config: str,
    runner: str,
    doc: str,
    stages: tuple[str, ...] = IMAGE_STAGES,
    one_size: bool = False,
    group: dict[str, Maker] = COMMANDS,
    arguments: tuple[str, ...] = ("src", "out"),
    pattern: bool = False,
    **defaults: Any,
) -> None:
    """Command `prep NAME` over `runner`, its options from the dataclass `config`
    ("module:Class"), each imported only when the command is made or runs; `pattern`: SRC is a
    brace pattern."""
    how = (config, runner, doc, stages, one_size, arguments, pattern, defaults)
    group[name] = functools.partial(_made, name, *how)


def _made(
    name: str,
    config: str,
    runner: str,
    doc: str,
    stages: tuple[str, ...],
    one_size: bool,
    arguments: tuple[str, ...],
    pattern: bool,
    defaults: dict[str, Any],
) -> Any:
    """The click command of `_writer`'s arguments."""
    module, cls = config.split(":")
    config_class = getattr(importlib.import_module(module), cls)

    def check(cfg: Any) -> None:
        if one_size and len(cfg.sizes) != 1:
            raise UsageError(
                f"prep {name} makes one size, not {cfg.sizes}: use prep pack --sizes for several"
            )

    cmd = command(config_class, runner, stages, doc, defaults, check, arguments)
    if pattern:  # more arguments than SRC OUT: an unquoted brace pattern the shell expanded

        @functools.wraps(cmd)
        def checked(ctx: typer.Context, **values: Any) -> None:
            if ctx.args:
                from prep.kinds.importers.config import unquoted

                raise unquoted(f"{len(ctx.args) + 2} arguments where SRC OUT are 2")
            cmd(**values)

        ctx = inspect.Parameter("ctx", KIND, annotation=typer.Context)
        params = [ctx, *inspect.signature(cmd).parameters.values()]
        checked.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    made = checked if pattern else cmd
    return _one(name, made, {"allow_extra_args": pattern})


def _one(name: str, fn: Any, settings: dict[str, Any] | None = None) -> Any:
    """The click command of `fn`, made as a group's would be (a Typer of one command)."""
    one = _typer()
    one.command(name, cls=Command, context_settings=settings)(friendly(fn))
    return typer.main.get_command(one)


def _plain(name: str, function: str) -> None:
    """Command `prep NAME` of `function` ("module:function"), imported when it is made."""

    def make() -> Any:
        module, attr = function.split(":")
        return _one(name, getattr(importlib.import_module(module), attr))

    COMMANDS[name] = make


PACK_HELP = """Pack images into uint8 shards at one or more sizes, from ONE decode each.

Example: prep pack data/raw/images data/packed --sizes 128,256 --masks data/raw/masks
"""

RESIZE_HELP = """Pack at one size (pack with a single --size).

Example: prep resize data/raw/images data/resized --size 512 --mode fit
"""

GRAYSCALE_HELP = """Pack one-channel images, converted at decode time (pack --gray).

Example: prep grayscale data/raw/images data/gray --size 256
"""

TOKENIZE_HELP = """Tokenize text into flat token shards with document offsets, split train/val.

Tokens are uint8/16/32, the narrowest that holds the vocabulary; the tokenizer file travels in OUT.

Example: prep tokenize data/demo-raw/text data/demo-tokens --tokenizer bpe --vocab-size 512
"""

AUDIO_HELP = """Decode sound files once, resample with soxr, store int16 (or float16) clips, ragged.

WAV, FLAC, OGG/Vorbis, Opus and MP3 through libsndfile, other formats through FFmpeg (PyAV).
Class sub-folders (or a CSV/JSONL list, or --labels) give labels; AudioDataset reads windows.

Example: prep audio speech/ packed/speech --rate 16000 --mono --max-seconds 30
"""

VOLUMES_HELP = """Pack 3-D scans (NIfTI, DICOM) once: reorient, resample, window, crop.

PatchDataset then reads random patches through memory maps.

Example: prep volumes scans/ packed-ct/ --labels segs/ --spacing 1.5,1.5,1.5 --window -1000,400
"""

SAMPLES_HELP = """Pack samples of any shape: a recipe's make(input) returns a dict of its FIELDS.

Inputs: a .csv/.jsonl/.parquet file (each row a dict), a .txt of paths, or a folder (paths).
make() returns None to skip an input, or raises prep.Reject("why") to record it as a reject.

Example: prep samples annotations.jsonl packed --recipe recipes/detection.py --jobs 2
"""

TABLE_HELP = """Pack CSV/TSV/JSONL/Parquet tables (.csv.gz too) into typed column arrays.

Integers narrowed, floats float32, text and --categorical columns as codes with their
vocabulary, a text target as class ids 0..K-1, rows split train/val by a hash.

Example: prep table data/*.csv packed-tab/ --target label --categorical city,device
"""

VIDEO_HELP = """\
Decode videos once at a fixed --fps and --size: frames raw or JPEG, one video a sample.

Frames are picked by timestamp (variable frame rates come out right) and turned upright by the
file's rotation; class sub-folders give labels; --max-frames / --clip-seconds cut long videos.
ClipDataset then reads clips of --frames frames straight from the maps.

Example: prep video data/demo-video data/packed-video --fps 8 --size 64 --codec jpeg
"""

PACK = "prep.kinds.images.pack:pack"
AUDIO_STAGES = ("list", "read", "resample", "write", "checksum")
VIDEO_STAGES = ("read", "decode", "resize", "encode", "write")
IMAGES = "prep.kinds.images.config:PackConfig"
_writer("pack", IMAGES, PACK, PACK_HELP)
_writer("resize", IMAGES, PACK, RESIZE_HELP, one_size=True)
_writer("grayscale", IMAGES, PACK, GRAYSCALE_HELP, one_size=True, gray=True)
TOKENIZE = ("prep.kinds.text.config:TokenizeConfig", "prep.kinds.text.tokenize:tokenize")
_writer("tokenize", *TOKENIZE, TOKENIZE_HELP, TEXT_STAGES)
AUDIO = ("prep.kinds.audio.config:AudioConfig", "prep.kinds.audio.pack:audio")
_writer("audio", *AUDIO, AUDIO_HELP, AUDIO_STAGES)
VOLUMES = ("prep.kinds.volumes.config:VolumeConfig", "prep.kinds.volumes.pack:volumes")
_writer("volumes", *VOLUMES, VOLUMES_HELP, ())
SAMPLES = ("prep.kinds.samples.config:SamplesConfig", "prep.kinds.samples.pack:pack_recipe")
_writer("samples", *SAMPLES, SAMPLES_HELP)
TABLE = ("prep.kinds.table.config:TableConfig", "prep.kinds.table.pack:pack_table")
_writer("table", *TABLE, TABLE_HELP, ())
VIDEO = ("prep.kinds.video.config:VideoConfig", "prep.kinds.video.pack:pack_video")
_writer("video", *VIDEO, VIDEO_HELP, VIDEO_STAGES)


def upgrade(
    root: Annotated[Path, typer.Argument(help="A dataset packed by an older prep.")],
) -> None:
    """Rewrite a dataset of format version 1-3 as version 4, in place (its manifest only).

    Older datasets open as they are; upgraded, their manifest declares fields as a new pack's.

    Example: prep upgrade data/old-packed
    """
    from prep.run.upgrade import upgrade as rewrite

    typer.echo(rewrite(root))


_plain("upgrade", "prep.cli.main:upgrade")


import_app = _typer(
    cls=lazy_group(IMPORTERS),
    help="Import data that sits in another format (COCO, image-text pairs, ...) as samples.",
)


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

_add = functools.partial(_writer, group=IMPORTERS)
COCO_ARGUMENTS = ("src", "images", "out")  # COCO's IMAGES_DIR between SRC and OUT
IMPORTER = "prep.kinds.importers.config:{}Config"
COCO = (IMPORTER.format("Coco"), "prep.kinds.importers.coco:import_coco")
_add("coco", *COCO, COCO_HELP, arguments=COCO_ARGUMENTS)
_add("pairs", IMPORTER.format("Pairs"), "prep.kinds.importers.pairs:import_pairs", PAIRS_HELP)
_add("hf", IMPORTER.format("HF"), "prep.kinds.importers.hf:import_hf", HF_HELP)
WDS = (IMPORTER.format("Wds"), "prep.kinds.importers.wds:import_webdataset")
_add("webdataset", *WDS, WDS_HELP, pattern=True)


_plain("demo", "prep.cli.demo:demo")
for _name in ("info", "verify", "preview", "tune", "report", "dupes"):
    _plain(_name, f"prep.cli.inspect:{_name}")
_plain("log", "prep.cli.grow:log_")
for _name in ("merge", "card", "remove", "export", "compact"):
    _plain(_name, f"prep.cli.grow:{_name}")
for _name in ("issues", "labels"):  # issue 39
    _plain(_name, f"prep.cli.quality:{_name}")
app.add_typer(import_app, name="import")


@app.callback(invoke_without_command=True)
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    if version:
        typer.echo(f"prep {__version__}")
        raise typer.Exit()
