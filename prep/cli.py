"""The `prep` command line: thin Typer commands over plain functions (no torch imported here)."""

from __future__ import annotations

import dataclasses
import functools
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer

from loaders.format import FormatError
from prep import PrepError, __version__

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


def int_list(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a list of sizes, e.g. 128,256") from None


def config_overrides(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The command's values for the fields of config class `cls` (paths as strings); None means
    "not given", so the config file or the default applies."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: str(v) if isinstance(v, Path) else v for k, v in values.items() if k in names}


ConfigOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--config", "-c", help="TOML config; default configs/default.toml when SRC is not given."
    ),
]
JobsOpt = Annotated[
    Optional[int], typer.Option("--jobs", "-j", help="Worker processes (0: all cores).")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
LimitOpt = Annotated[Optional[int], typer.Option(help="Only the first N inputs.")]
MaxRejectsOpt = Annotated[
    Optional[float],
    typer.Option(help="Fail when more than this fraction of inputs is rejected."),
]
OverwriteOpt = Annotated[
    Optional[bool],
    typer.Option("--overwrite", help="Replace a non-empty OUT (kept readable until done)."),
]
ResumeOpt = Annotated[
    Optional[bool],
    typer.Option("--resume", help="Finish an interrupted run, reusing its verified shards."),
]
ProfileOpt = Annotated[
    bool,
    typer.Option("--profile", help="After the summary, print where the time went per stage."),
]


def _pack_command(name: str, doc: str, default_gray: bool | None, one_size: bool) -> None:
    @friendly
    def command(
        src: Annotated[
            Optional[Path],
            typer.Argument(
                help="Folder of images (class sub-folders give labels) or a .csv/.jsonl list."
            ),
        ] = None,
        out: Annotated[Optional[Path], typer.Argument(help="Output dataset folder.")] = None,
        sizes: Annotated[
            Optional[str],
            typer.Option(
                "--sizes", "--size", "-s", help="Side(s) in px, comma-separated: 128,256,512."
            ),
        ] = None,
        mode: Annotated[
            Optional[str],
            typer.Option(
                help="fill: crop to square | fit: pad to square | stretch: ignore aspect."
            ),
        ] = None,
        gray: Annotated[
            Optional[bool],
            typer.Option("--gray/--rgb", help="One channel, converted at decode time."),
        ] = default_gray,
        masks: Annotated[
            Optional[Path], typer.Option(help="Folder of masks with the images' relative stems.")
        ] = None,
        format: Annotated[Optional[str], typer.Option("--format", help="npy | h5")] = None,
        shard_size: Annotated[Optional[int], typer.Option(help="Samples per shard.")] = None,
        jobs: JobsOpt = None,
        backend: Annotated[
            Optional[str],
            typer.Option(help="loky: processes here | dask: a distributed cluster (prep[dask])."),
        ] = None,
        scheduler: Annotated[
            Optional[str],
            typer.Option(
                help="dask scheduler tcp://HOST:PORT (workers see SRC and OUT at the same "
                "paths); none: a LocalCluster of --jobs processes here."
            ),
        ] = None,
        pad_value: Annotated[Optional[int], typer.Option(help="fit mode pad colour.")] = None,
        max_pixels: Annotated[
            Optional[int], typer.Option(help="Refuse larger images before decoding.")
        ] = None,
        max_rejects: MaxRejectsOpt = None,
        limit: LimitOpt = None,
        shuffle_seed: Annotated[
            Optional[int],
            typer.Option(
                help="Store inputs in this seeded random order (mixes classes across "
                "shards for order='quasi_random'); default: sorted."
            ),
        ] = None,
        overwrite: OverwriteOpt = None,
        resume: ResumeOpt = None,
        config: ConfigOpt = None,
        quiet: QuietOpt = False,
        profile: ProfileOpt = False,
    ) -> None:
        from prep.config import PackConfig, load_config
        from prep.kinds.images.pack import pack
        from prep.run.profile import profile_table

        overrides = config_overrides(PackConfig, {**locals(), "sizes": int_list(sizes)})
        cfg = load_config(PackConfig, "pack", config, overrides)
        if one_size and len(cfg.sizes) != 1:
            raise typer.BadParameter(
                f"prep {name} makes one size, not {cfg.sizes}: use prep pack --sizes for several"
            )
        summary = pack(cfg, show_progress=not quiet, profile=profile)
        typer.echo(summary.line())
        if summary.stages is not None:
            workers = min(cfg.n_jobs, max(1, summary.shards - summary.reused))
            typer.echo(profile_table(summary.stages, workers=workers))

    command.__doc__ = doc
    app.command(name)(command)


_pack_command(
    "pack",
    """Pack images into uint8 shards at one or more sizes, from ONE decode each.

Example: prep pack data/raw/images data/packed --sizes 128,256 --masks data/raw/masks
""",
    None,
    one_size=False,
)
_pack_command(
    "resize",
    """Pack at one size (pack with a single --size).

Example: prep resize data/raw/images data/resized --size 512 --mode fit
""",
    None,
    one_size=True,
)
_pack_command(
    "grayscale",
    """Pack one-channel images, converted at decode time (pack --gray).

Example: prep grayscale data/raw/images data/gray --size 256
""",
    True,
    one_size=True,
)


@app.command()
@friendly
def tokenize(
    src: Annotated[
        Optional[Path],
        typer.Argument(help="Folder of .txt files, one .txt file, or a .jsonl file."),
    ] = None,
    out: Annotated[Optional[Path], typer.Argument(help="Output dataset folder.")] = None,
    tokenizer: Annotated[
        Optional[str],
        typer.Option(
            "--tokenizer", "-t", help="bytes (default) | char | bpe | path/to/tokenizer.json."
        ),
    ] = None,
    vocab_size: Annotated[
        Optional[int], typer.Option(help="bpe: vocabulary size to train (default 8192).")
    ] = None,
    val_fraction: Annotated[
        Optional[float],
        typer.Option(help="Share of documents in val, chosen by a hash of their text."),
    ] = None,
    split_lines: Annotated[
        Optional[bool],
        typer.Option("--split-lines", help=".txt: one document per line, not per file."),
    ] = None,
    text_field: Annotated[
        Optional[str], typer.Option(help=".jsonl: the field holding the text.")
    ] = None,
    errors: Annotated[
        Optional[str],
        typer.Option(help="Invalid UTF-8: strict (reject the document) | replace (U+FFFD)."),
    ] = None,
    shard_mb: Annotated[
        Optional[float], typer.Option(help="MB of text per shard (one task each).")
    ] = None,
    max_doc_mb: Annotated[
        Optional[float], typer.Option(help="Reject longer documents (memory stays bounded).")
    ] = None,
    max_rejects: MaxRejectsOpt = None,
    limit: LimitOpt = None,
    jobs: JobsOpt = None,
    overwrite: OverwriteOpt = None,
    resume: ResumeOpt = None,
    config: ConfigOpt = None,
    quiet: QuietOpt = False,
    profile: ProfileOpt = False,
) -> None:
    """Tokenize text into flat token shards (uint8/16/32) with document offsets, split into
    train and val; the tokenizer file travels in OUT.

    Example: prep tokenize data/demo-raw/text data/demo-tokens --tokenizer bpe --vocab-size 512
    """
    from prep.config import TokenizeConfig, load_config
    from prep.kinds.text.tokenize import tokenize as run

    overrides = config_overrides(TokenizeConfig, locals())
    cfg = load_config(TokenizeConfig, "tokenize", config, overrides)
    summary = run(cfg, show_progress=not quiet, profile=profile)
    typer.echo(summary.line())
    if summary.stages is not None:
        from prep.run.profile import TEXT_STAGES, profile_table

        workers = min(cfg.n_jobs, max(1, summary.shards - summary.reused))
        typer.echo(profile_table(summary.stages, TEXT_STAGES, workers))


@app.command()
@friendly
def demo(
    raw: Annotated[Path, typer.Argument(help="Folder to write the raw demo data into.")],
    count: Annotated[int, typer.Option(help="Number of images.")] = 64,
    seed: Annotated[int, typer.Option(help="Same seed, same bytes.")] = 0,
    max_side: Annotated[int, typer.Option(help="Largest image side in px.")] = 4032,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Write a deterministic demo raw dataset: class folders of photo-like images, masks, text.

    Example: prep demo data/demo-raw --count 64 --seed 0
    """
    import os

    from prep.demo import make_demo

    make_demo(raw, count, seed, jobs or os.cpu_count() or 1, max_side, not quiet)
    typer.echo(
        f"{raw}: {count} images in {raw / 'images'}, masks in {raw / 'masks'}, "
        f"text in {raw / 'text'}"
    )


@app.command()
@friendly
def info(
    root: Annotated[Path, typer.Argument(help="A packed dataset folder.")],
    batch_size: Annotated[int, typer.Option(help="Batch size for the RAM column.")] = 256,
) -> None:
    """Counts, fields, shapes, dtypes, bytes on disk and RAM per batch of a packed dataset.

    Example: prep info data/demo-packed --batch-size 128
    """
    from prep.inspect.report import info as describe

    typer.echo(describe(root, batch_size))


@app.command()
@friendly
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

    manifest, problems = check(root, limit)
    for p in problems:
        typer.echo(f"bad: {p}", err=True)
    if problems:
        typer.echo(
            f"error: {len(problems)} problems in {root}. HINT: restore the files named above, "
            "or pack the dataset again (--overwrite)",
            err=True,
        )
        raise typer.Exit(EXIT_FAILED)
    files = sum(len(s.files) for s in manifest.shards)
    typer.echo(f"{root}: ok, {manifest.num_samples} samples, {files} files verified")


@app.command()
@friendly
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
    masks: Annotated[bool, typer.Option("--masks/--no-masks", help="Overlay masks.")] = True,
) -> None:
    """A contact sheet of packed samples: index and class under each tile, masks in colour.

    Shows a wrong rotation, a bad crop or a misaligned mask at a glance.

    Example: prep preview data/demo-packed --size 128 --count 32 --output sheet.png
    """
    from prep.inspect.preview import preview as sheet

    typer.echo(sheet(root, size, count, output, columns, masks).line())


@app.command()
@friendly
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
    from prep.inspect.tune import plot as draw
    from prep.inspect.tune import tune as run

    try:
        counts = [int(w) for w in workers.split(",") if w.strip()] if workers else None
    except ValueError:
        raise typer.BadParameter(f"{workers!r} is not a list of counts, e.g. 0,2,4") from None
    result = run(root, size, batch_size, seconds, counts, prefetch_factor, limit, not quiet)
    typer.echo(result.table())
    typer.echo(result.advice())
    if plot is not None:
        draw(result, plot)
        typer.echo(f"plot: {plot}")


@app.callback(invoke_without_command=True)
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    if version:
        typer.echo(f"prep {__version__}")
        raise typer.Exit()
