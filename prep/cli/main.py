"""The `prep` command line: thin Typer commands over plain functions (no torch imported here)."""

from __future__ import annotations

import functools
import importlib
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

import prep.cli.inspect as inspect
import prep.cli.options as options
from loaders.format import FormatError
from prep.cli.demo import demo
from prep.cli.dupes import dupes
from prep.cli.imports import app as import_app
from prep.cli.report import report as html_report
from prep.kinds.audio.config import AudioConfig
from prep.kinds.images.config import PackConfig
from prep.kinds.samples.config import SamplesConfig
from prep.kinds.table.config import TableConfig
from prep.kinds.text.config import TokenizeConfig
from prep.kinds.video.config import VideoConfig
from prep.kinds.volumes.config import VolumeConfig
from prep.run.config import RunConfig
from prep.run.errors import PrepError, UsageError
from prep.run.profile import IMAGE_STAGES, TEXT_STAGES
from prep.version import __version__

app = typer.Typer(
    help="Pack raw images and text once, offline, into uint8 shards that `loaders` memory-maps.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
F = TypeVar("F", bound=Callable[..., Any])
EXIT_FAILED, EXIT_INTERRUPTED = 1, 130


def friendly(fn: F) -> F:
    """A user-fixable problem becomes one line on stderr and a non-zero exit, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # SIGTERM (a batch scheduler's stop, `kill`) ends a run as Ctrl-C does: workers stopped,
        # temp files removed, finished shards kept for --resume.
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None
        try:
            return fn(*args, **kwargs)
        except (PrepError, FormatError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(getattr(e, "exit_code", EXIT_FAILED)) from None
        except KeyboardInterrupt:
            typer.echo(
                "interrupted: temp files removed, finished shards kept; "
                "rerun with --resume to finish",
                err=True,
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            if in_main:
                signal.signal(signal.SIGTERM, previous)

    return wrapper  # type: ignore[return-value]


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _pack(name: str, doc: str, gray: bool | None = None, one_size: bool = False) -> None:
    def run(cfg: Any, quiet: bool, profile: bool) -> None:
        from prep.kinds.images.pack import pack

        if one_size and len(cfg.sizes) != 1:
            raise UsageError(
                f"prep {name} makes one size, not {cfg.sizes}: use prep pack --sizes for several"
            )
        _report(cfg, pack(cfg, show_progress=not quiet, profile=profile), IMAGE_STAGES)

    command = friendly(options.command(PackConfig, run, {"gray": gray}))
    command.__doc__ = doc
    app.command(name)(command)


def _report(cfg: Any, summary: Any, stages: tuple[str, ...]) -> None:
    """The summary line, then the --profile table (known `stages` first, in their order)."""
    from prep.run.profile import profile_table

    typer.echo(summary.line())
    if summary.stages is not None:
        workers = min(cfg.n_jobs, max(1, summary.shards - summary.reused))
        typer.echo(profile_table(summary.stages, stages, workers))


_pack(
    "pack",
    """Pack images into uint8 shards at one or more sizes, from ONE decode each.

Example: prep pack data/raw/images data/packed --sizes 128,256 --masks data/raw/masks
""",
)
_pack(
    "resize",
    """Pack at one size (pack with a single --size).

Example: prep resize data/raw/images data/resized --size 512 --mode fit
""",
    one_size=True,
)
_pack(
    "grayscale",
    """Pack one-channel images, converted at decode time (pack --gray).

Example: prep grayscale data/raw/images data/gray --size 256
""",
    gray=True,
    one_size=True,
)


def _kind(
    name: str, config: type[RunConfig], runner: str, stages: tuple[str, ...], doc: str
) -> None:
    """A writing command: load its config, run `runner` ("module:function"), report."""

    def run(cfg: Any, quiet: bool, profile: bool) -> None:
        module, function = runner.split(":")
        write = getattr(importlib.import_module(module), function)
        _report(cfg, write(cfg, show_progress=not quiet, profile=profile), stages)

    command = friendly(options.command(config, run))
    command.__doc__ = doc
    app.command(name)(command)


# The run driver's data kinds beside pack: adding a kind is one entry here (its module is
# imported only when its command runs).
KINDS: dict[str, tuple[type[RunConfig], str, tuple[str, ...], str]] = {
    "tokenize": (
        TokenizeConfig,
        "prep.kinds.text.tokenize:tokenize",
        TEXT_STAGES,
        """Tokenize text into flat token shards with document offsets, split train/val.

Tokens are uint8/16/32, the narrowest that holds the vocabulary; the tokenizer file travels in OUT.

Example: prep tokenize data/demo-raw/text data/demo-tokens --tokenizer bpe --vocab-size 512
""",
    ),
    "audio": (
        AudioConfig,
        "prep.kinds.audio.pack:audio",
        ("list", "read", "resample", "write", "checksum"),
        """Decode sound files once, resample with soxr, store int16 (or float16) clips, ragged.

WAV, FLAC, OGG/Vorbis, Opus and MP3 through libsndfile, other formats through FFmpeg (PyAV).
Class sub-folders (or a CSV/JSONL list, or --labels) give labels; AudioDataset reads windows.

Example: prep audio speech/ packed/speech --rate 16000 --mono --max-seconds 30
""",
    ),
    "volumes": (
        VolumeConfig,
        "prep.kinds.volumes.pack:volumes",
        (),
        """Pack 3-D scans (NIfTI, DICOM) once: reorient, resample, window, crop.

PatchDataset then reads random patches through memory maps.

Example: prep volumes scans/ packed-ct/ --labels segs/ --spacing 1.5,1.5,1.5 --window -1000,400
""",
    ),
    "samples": (
        SamplesConfig,
        "prep.kinds.samples.pack:pack_recipe",
        IMAGE_STAGES,
        """Pack samples of any shape: a recipe's make(input) returns a dict of its FIELDS.

Inputs: a .csv/.jsonl/.parquet file (each row a dict), a .txt of paths, or a folder (paths).
make() returns None to skip an input, or raises prep.Reject("why") to record it as a reject.

Example: prep samples annotations.jsonl packed --recipe recipes/detection.py --jobs 2
""",
    ),
    "table": (
        TableConfig,
        "prep.kinds.table.pack:pack_table",
        (),
        """Pack CSV/TSV/JSONL/Parquet tables (.csv.gz too) into typed column arrays.

Integers narrowed, floats float32, text and --categorical columns as codes with their
vocabulary, a text target as class ids 0..K-1, rows split train/val by a hash.

Example: prep table data/*.csv packed-tab/ --target label --categorical city,device
""",
    ),
    "video": (
        VideoConfig,
        "prep.kinds.video.pack:pack_video",
        ("read", "decode", "resize", "encode", "write"),
        """Decode videos once at a fixed --fps and --size: frames raw or JPEG, one video a sample.

Frames are picked by timestamp (variable frame rates come out right) and turned upright by the
file's rotation; class sub-folders give labels; --max-frames / --clip-seconds cut long videos.
ClipDataset then reads clips of --frames frames straight from the maps.

Example: prep video data/demo-video data/packed-video --fps 8 --size 64 --codec jpeg
""",
    ),
}
for _name, _entry in KINDS.items():
    _kind(_name, *_entry)


@app.command()
@friendly
def upgrade(
    root: Annotated[Path, typer.Argument(help="A dataset packed by an older prep.")],
) -> None:
    """Rewrite a dataset of format version 1-3 as version 4, in place (its manifest only).

    Older datasets open as they are; upgraded, their manifest declares fields as a new pack's.

    Example: prep upgrade data/old-packed
    """
    from prep.run.upgrade import upgrade as rewrite

    typer.echo(rewrite(root))


app.command()(friendly(demo))  # the demo data (prep.cli.demo)

# info, verify, preview, tune: the commands that look at a packed dataset (prep.inspect).
for _look in (inspect.info, inspect.verify, inspect.preview, inspect.tune, html_report):
    app.command()(friendly(_look))
app.command()(friendly(dupes))  # near-duplicates and leakage (prep.inspect.dupes)

# prep import SOURCE: a sub-app of its own (prep.cli.imports), each command made friendly here.
for _imported in import_app.registered_commands:
    _imported.callback = friendly(_imported.callback)  # type: ignore[type-var]
app.add_typer(import_app, name="import")


@app.callback(invoke_without_command=True)
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    if version:
        typer.echo(f"prep {__version__}")
        raise typer.Exit()
