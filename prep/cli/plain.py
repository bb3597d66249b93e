"""Command-line values coerced without pydantic, where Typer's own coercion would give the same.

Typer (0.2x) coerces every value through a pydantic TypeAdapter: importing pydantic and
building one adapter an option costs about 100 ms at each start, a third of a one-image
`prep pack` (issue 40). prep's options are plain str, int, float, bool and Path (and lists of
Path), with no constraints: `install` (prep.cli.group calls it) gives such a parameter a
`Plain` coercion that does what Typer's does for the values these patterns match
(`coerce_cli_path` keeps Typer's path checks), and hands any other value to Typer's coercion,
so that its results and messages stay Typer's. A Typer without these internals keeps its own
coercion (nothing here is required).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

try:  # Typer's internals of 0.2x; elsewhere Group is a plain TyperGroup
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_path
    from typer.core import _TyperParameter
except ImportError:  # pragma: no cover - another Typer
    RuntimeParam = None  # type: ignore[assignment,misc]

# The strings pydantic reads as Python does (it also takes "1.0" for an int: handed over).
_NUMBER = {
    int: re.compile(r"\s*[+-]?[0-9]+\s*"),
    float: re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*"),
}
_PLAIN = (str, int, float, bool, Path)  # bool: a flag not given is None, not False
_CONSTRAINTS = ("parser", "min", "max", "path_type", "formats")
_PATH_FLAGS = ("exists", "resolve_path", "allow_dash", "writable")


def _plain(annotation: Any, info: Any) -> bool:
    """An annotation `Plain` coerces as Typer would: str/int/float/Path, or a list of one."""
    if get_origin(annotation) is list:
        annotation = get_args(annotation)[0]
    if annotation not in _PLAIN:
        return False
    constrained = any(getattr(info, k, None) is not None for k in _CONSTRAINTS)
    return not constrained and not any(getattr(info, k, False) for k in (*_PATH_FLAGS, "clamp"))


class _Unmatched(Exception):
    """A value `Plain` leaves to Typer's coercion."""


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class Plain(RuntimeParam):
        """Typer's coercion of a plain annotation, for the values matched here."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                if get_origin(self.annotation) is list:
                    kind = get_args(self.annotation)[0]
                    items = value if isinstance(value, (list, tuple)) else [value]
                    return [self._one(v, kind, param, ctx) for v in items]
                return self._one(value, self.annotation, param, ctx)
            except _Unmatched:
                param._runtime_param = build_runtime_param(param.type_descriptor)
                return param._runtime_param._coerce_value(value, param=param, ctx=ctx)

        def _one(self, value: Any, kind: type, param: Any, ctx: Any) -> Any:
            if type(value) is kind:  # a default, already typed
                return value
            if not isinstance(value, str):
                raise _Unmatched
            if kind is str:
                return value
            if kind is bool:  # a flag gives a bool; a string (an envvar) goes to Typer
                raise _Unmatched
            if kind is Path:
                if not value or "\0" in value:
                    raise _Unmatched
                return coerce_cli_path(
                    Path(value), self.parameter_info, path_type=Path, param=param, ctx=ctx
                )
            if not _NUMBER[kind].fullmatch(value):
                raise _Unmatched
            return kind(value)


def install(params: Any) -> None:
    """Give each plain parameter (a command's, its --help too) `Plain` (before it parses)."""
    if RuntimeParam is None:
        return
    for p in params:
        if not isinstance(p, _TyperParameter) or getattr(p, "_runtime_param", 0) is not None:
            continue
        desc = getattr(p, "type_descriptor", None)
        if desc is None or getattr(desc, "file_annotation", 0) is not None:
            continue
        if not _plain(desc.annotation, desc.parameter_info):
            continue
        try:
            p._runtime_param = Plain(annotation=desc.annotation, parameter_info=desc.parameter_info)
        except TypeError:  # a Typer whose RuntimeParam asks more: its own coercion stays
            return
