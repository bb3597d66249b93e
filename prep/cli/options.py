"""Typer parameters made from a config dataclass: each option is declared once, in prep.run.config.

`config_parameters(PackConfig)` gives SRC and OUT as arguments and every other field as an
option whose default is None ("not given": the config file or the dataclass default applies),
with the field's help and flags. `command(...)` wraps a function taking the loaded config."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional, get_args, get_origin, get_type_hints

import typer

from prep.run.config import RunConfig, listed, load_config

ARGUMENTS = ("src", "out")


def shown_default(f: dataclasses.Field[Any], given: Any) -> str:
    """The default --help shows for a field: the command's own (`given`), else the dataclass
    default, as it is typed (256,512; a flag's side, e.g. rgb of --gray/--rgb); "": none."""
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


def _parameter(f: dataclasses.Field[Any], hint: Any, default: Any) -> inspect.Parameter:
    """One dataclass field as a Typer parameter (None default: not given, the config file's
    or the dataclass default applies; --help shows the latter)."""
    args = get_args(hint)
    base = next(a for a in args if a is not type(None)) if type(None) in args else hint  # X | None
    help_text = f.metadata.get("help", "")
    if f.name in ARGUMENTS:
        info: Any = typer.Argument(help=help_text, show_default=False)
        # str | list[str]: SRC takes several paths (a shell's expansion of data/*.csv)
        base = list[Path] if any(get_origin(a) is list for a in args) else Path
    else:
        flags = f.metadata.get("flags") or ()
        if get_origin(base) is list:  # list[int]: "128,256"
            base = str
        shown = shown_default(f, default)
        # In the help text, not show_default= (Typer shows a given text as "[default: (x)]");
        # no brackets: Rich would read them as markup.
        help_text += f" (default: {shown})" if shown else ""
        info = typer.Option(*flags, help=help_text, show_default=False)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Parameter(
        f.name, kind, default=default, annotation=Annotated[Optional[base], info]
    )


def config_parameters(cls: type[RunConfig], defaults: dict[str, Any]) -> list[inspect.Parameter]:
    hints = get_type_hints(cls)
    fields = sorted(dataclasses.fields(cls), key=lambda f: f.name not in ARGUMENTS)
    return [_parameter(f, hints[f.name], defaults.get(f.name)) for f in fields]


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
    run: Callable[[Any, bool, bool], None],
    defaults: dict[str, Any] | None = None,
) -> Callable[..., None]:
    """A Typer command function for config class `cls`: it loads the config (defaults < file
    < command line) and calls `run(cfg, quiet, profile)`."""

    def body(**values: Any) -> None:
        config, quiet, profile = (values.pop(k) for k in EXTRA)
        given = {k: _text(v) for k, v in values.items()}
        if isinstance(given.get("sizes"), str):
            given["sizes"] = listed(given["sizes"], "--sizes", int)
        run(load_config(cls, cls.SECTION, config, given), quiet, profile)

    params = config_parameters(cls, defaults or {})
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params += [inspect.Parameter(k, kind, default=d, annotation=a) for k, (a, d) in EXTRA.items()]
    wrapper = functools.wraps(body)(lambda **kw: body(**kw))
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return wrapper
