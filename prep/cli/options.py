"""What every command shares: Typer commands made from a config dataclass (each option declared
once, with `opt`), and errors as one line and a non-zero exit (`friendly`, `reading`)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import importlib
import inspect
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar, get_args, get_origin, get_type_hints

import typer

from prep.run.config import RunConfig, listed, load_config
from prep.run.errors import PrepError
from prep.run.profile import profile_table

F = TypeVar("F", bound=Callable[..., Any])
EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
KIND = inspect.Parameter.POSITIONAL_OR_KEYWORD  # of every parameter of a command made here


def friendly(fn: F) -> F:
    """A user-fixable problem becomes one line on stderr and a non-zero exit, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # SIGTERM (a batch scheduler's stop) ends a run as Ctrl-C does, resumable.
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if in_main else None
        try:
            return fn(*args, **kwargs)
        except (PrepError, _format_error()) as e:
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


def _format_error() -> type[Exception]:
    """loaders' FormatError where loaders.format is loaded (else none can have been raised):
    `--help` need not import it, nor numpy with it."""
    spec = sys.modules.get("loaders.format.spec")
    return spec.FormatError if spec is not None else PrepError


@contextlib.contextmanager
def reading(root: Path) -> Iterator[None]:
    """A dataset that cannot be read (a server down, a folder refused) is one line."""
    try:
        yield
    except OSError as e:
        name = f"{e.filename}: " if e.filename and str(e.filename) not in str(e) else ""
        raise PrepError(f"{name}{e.strerror or e}. HINT: check that {root} can be read") from None


def shown_default(f: dataclasses.Field[Any], given: Any) -> str:
    """The default --help shows for a field (`given`, else the dataclass's), as it is typed
    (256,512; rgb of --gray/--rgb); "": none."""
    value = given if given is not None else f.default
    if value is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    if value is None or value is dataclasses.MISSING:
        return ""
    if isinstance(value, bool):
        pair = next((x for x in f.metadata.get("flags") or () if "/" in x), None)
        if pair is not None:
            return pair.split("/")[0 if value else 1].lstrip("-")
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _parameter(
    f: dataclasses.Field[Any], hint: Any, default: Any, arguments: tuple[str, ...]
) -> inspect.Parameter:
    """One dataclass field as a Typer parameter. Its default None means "not given": the
    config file's value or the dataclass default applies (--help shows the latter)."""
    args = get_args(hint)
    base = next(a for a in args if a is not type(None)) if type(None) in args else hint  # X | None
    help_text = f.metadata.get("help", "")
    if f.name in arguments:
        info: Any = typer.Argument(help=help_text, show_default=False)
        # str | list[str]: SRC takes several paths (a shell's expansion of data/*.csv)
        base = list[Path] if any(get_origin(a) is list for a in args) else Path
    else:
        if get_origin(base) is list:  # list[int]: "128,256"
            base = str
        shown = shown_default(f, default)
        # Not show_default= (Typer shows "[default: (x)]"); no brackets: Rich markup.
        help_text += f" (default: {shown})" if shown else ""
        info = typer.Option(*f.metadata.get("flags") or (), help=help_text, show_default=False)
    return inspect.Parameter(
        f.name, KIND, default=default, annotation=Annotated[Optional[base], info]
    )


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
ProfileOpt = Annotated[
    bool, typer.Option("--profile", help="After the summary, print where the time went per stage.")
]
EXTRA = {"config": (ConfigOpt, None), "quiet": (QuietOpt, False), "profile": (ProfileOpt, False)}


def _text(value: Any) -> Any:
    """Paths as the strings the config holds (a list of them too)."""
    if isinstance(value, list):
        return [_text(v) for v in value] or None
    return str(value) if isinstance(value, Path) else value


def command(
    cls: type[RunConfig],
    runner: str,
    stages: tuple[str, ...],
    doc: str,
    defaults: dict[str, Any],
    check: Callable[[Any], None],
    arguments: tuple[str, ...],
) -> Callable[..., None]:
    """A writing command for config class `cls`: it loads the config (defaults < file <
    command line), `check`s it, runs `runner` ("module:function", imported only then) and
    prints its summary (with --profile the stage table). The fields `arguments` are positional."""

    def body(**values: Any) -> None:
        config, quiet, profile = (values.pop(k) for k in EXTRA)
        given = {k: _text(v) for k, v in values.items()}
        if isinstance(given.get("sizes"), str):
            given["sizes"] = listed(given["sizes"], "--sizes", int)
        cfg = load_config(cls, cls.SECTION, config, given)
        check(cfg)
        module, function = runner.split(":")
        run = getattr(importlib.import_module(module), function)
        if not gc.isenabled():  # the start-up's (Group.main): its objects kept out of the run's
            gc.freeze()  # collections
            gc.enable()
        summary = run(cfg, not quiet, profile)
        typer.echo(summary.line())
        if summary.stages is not None:
            workers = min(cfg.n_jobs, max(1, summary.shards - summary.reused))
            typer.echo(profile_table(summary.stages, stages, workers))

    hints = get_type_hints(cls)
    order = {name: i for i, name in enumerate(arguments)}
    fields = sorted(dataclasses.fields(cls), key=lambda f: order.get(f.name, len(order)))
    params = [_parameter(f, hints[f.name], defaults.get(f.name), arguments) for f in fields]
    params += [inspect.Parameter(k, KIND, default=d, annotation=a) for k, (a, d) in EXTRA.items()]
    body.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    body.__doc__ = doc
    return body
