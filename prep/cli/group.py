"""prep's command groups: commands made when first asked for, values coerced without pydantic.

A writing command's options come from its config dataclass (prep.cli.options.command): making
all of them, and importing every config module, is about a tenth of a one-image `prep pack`
(issue 40). `lazy_group` makes a group class whose `lazy` commands are built when a command
line, `--help` or the docs ask for them, listed first, in the order they were registered.

Help prints without Rich (its formatting is about 70 ms of `prep --help`, issue 40): `Command`
and `Group` keep each `Example:` paragraph as written (a command line to copy, not rewrapped)
and list a command by the first paragraph of its help, whole.
"""

from __future__ import annotations

import atexit
import gc
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from typer.core import TyperCommand, TyperGroup

from prep.cli.plain import install

Maker = Callable[[], Any]  # () -> a click Command
HELP_WIDTH = 100  # the widest help prints, on a wider terminal (click's own default: 80)


def _paragraphs(help: str | None) -> list[str]:
    return inspect.cleandoc(help or "").partition("\f")[0].split("\n\n")


def write_help(help: str | None, formatter: Any) -> None:
    """A command's help, rewrapped to the terminal but for `Example:` paragraphs (kept whole)."""
    kept = ["\b\n" + p if p.startswith("Example") else p for p in _paragraphs(help)]
    if any(kept):
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text("\n\n".join(kept))


def short_help(cmd: Any) -> str:
    """What a group's --help says of a command: its help's first paragraph, on one line."""
    return cmd.short_help or " ".join(_paragraphs(cmd.help)[0].split())


class PlainHelp:
    """Help that keeps its examples whole (`write_help`), listed by its first paragraph."""

    help: str | None

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        write_help(self.help, formatter)

    def get_short_help_str(self, limit: int = 45) -> str:
        return short_help(self)


class Command(PlainHelp, TyperCommand):
    """A TyperCommand with PlainHelp."""


class Group(PlainHelp, TyperGroup):
    """A TyperGroup whose commands coerce plain values without pydantic (prep.cli.plain), whose
    `lazy` commands are made on first use, and whose help keeps its examples whole."""

    lazy: ClassVar[dict[str, Maker]] = {}

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.lazy:
            command = self.commands[cmd_name] = self.lazy[cmd_name]()
        if command is not None:
            install(command.get_params(ctx))
        return command

    def list_commands(self, ctx: Any) -> list[str]:
        made = [n for n in super().list_commands(ctx) if n not in self.lazy]
        return [*self.lazy, *made]

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        install(self.get_params(ctx))
        return super().parse_args(ctx, args)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """The command line, its start-up without the cyclic GC: the imports' objects are not
        garbage, and each collection walked them again (12M of a one-image pack's 1,107M
        instructions). A writing command turns it back on for its run (prep.cli.options)."""
        gc.disable()
        try:
            return super().main(*args, **kwargs)
        finally:
            gc.unfreeze()
            gc.enable()


# At exit, after the other atexit handlers (the first registered runs last): every object kept
# out of the interpreter's last collections, which walked them all (51M instructions of 1,107M).
atexit.register(gc.freeze)


def lazy_group(lazy: dict[str, Maker]) -> type[Group]:
    """A Group class with these lazy commands (Typer makes the group from its class)."""
    return type("LazyGroup", (Group,), {"lazy": lazy})
