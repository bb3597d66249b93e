"""prep's command groups: commands made when first asked for, values coerced without pydantic.

A writing command's options come from its config dataclass (prep.cli.options.command): making
all of them, and importing every config module, is about a tenth of a one-image `prep pack`
(issue 40). `lazy_group` makes a group class whose `lazy` commands are built when a command
line, `--help` or the docs ask for them, listed first, in the order they were registered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from typer.core import TyperGroup

from prep.cli.plain import install

Maker = Callable[[], Any]  # () -> a click Command


class Group(TyperGroup):
    """A TyperGroup whose commands coerce plain values without pydantic (prep.cli.plain), and
    whose `lazy` commands are made on first use."""

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


def lazy_group(lazy: dict[str, Maker]) -> type[Group]:
    """A Group class with these lazy commands (Typer makes the group from its class)."""
    return type("LazyGroup", (Group,), {"lazy": lazy})
