"""The CLI reference page, made from the Typer app at build time (mkdocs hook), so that it
cannot drift from the code: every command and sub-command, its usage, its help (with its
example), and a table of its arguments and options with their defaults.

docs/cli.md holds the page's introduction and the marker `<!-- cli-reference -->`, which this
hook replaces. `python docs/hooks/cli.py` prints the generated part.
"""

from __future__ import annotations

import re
from typing import Any

MARKER = "<!-- cli-reference -->"
DEFAULT = re.compile(r"\s*\(default: (.*?)\)\s*$")


def _cell(text: str) -> str:
    """One table cell: a line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _param_row(param: Any) -> str:
    help_text = param.help or ""
    found = DEFAULT.search(help_text)
    if found:
        default, help_text = f"`{found.group(1)}`", help_text[: found.start()]
    elif param.default not in (None, False, (), []):
        default = f"`{param.default}`"
    else:
        default = "required" if param.required else ""
    if param.param_type_name == "argument":
        name = f"`{(param.metavar or param.name).upper()}`"
    else:
        name = " / ".join(f"`{o}`" for o in (*param.opts, *param.secondary_opts))
    return f"| {name} | {_cell(default)} | {_cell(help_text)} |"


def _help_blocks(help_text: str) -> list[str]:
    """The command's help as Markdown: paragraphs, and each `Example: ...` as a code block."""
    out = []
    for para in help_text.strip().split("\n\n"):
        if para.startswith("Example"):
            commands = para.split(":", 1)[1].strip()
            lines = [c.strip() for c in re.split(r";\s*(?=prep )", commands)]
            out += ["Example:", "", "```", *lines, "```"]
        else:
            out.append(" ".join(para.split()))
        out.append("")
    return out


def command_markdown(cmd: Any, path: str, ctx: Any) -> list[str]:
    """A command's section (a group's: its help, then each sub-command's), `path`: `prep x`."""
    lines = [f"## `{path}`", ""]
    if hasattr(cmd, "commands"):  # a group: `prep import`
        lines += _help_blocks(cmd.help or "")
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            lines += [
                line.replace("## ", "### ", 1) if line.startswith("## ") else line
                for line in command_markdown(sub, f"{path} {name}", ctx)
            ]
        return lines
    pieces = " ".join(
        p if p == "[OPTIONS]" else p.upper().strip("{}") for p in cmd.collect_usage_pieces(ctx)
    )
    lines += ["```", f"{path} {pieces}", "```", ""]
    lines += _help_blocks(cmd.help or "")
    params = [p for p in cmd.params if not getattr(p, "hidden", False) and p.name != "help"]
    if params:
        lines += ["| argument / option | default | what |", "| --- | --- | --- |"]
        lines += [_param_row(p) for p in params]
        lines.append("")
    return lines


def reference() -> str:
    """Every command of `prep`, in the app's order."""
    import typer

    from prep.cli.main import app

    group = typer.main.get_command(app)
    ctx = typer.Context(group, info_name="prep")
    lines: list[str] = []
    for name in group.list_commands(ctx):
        lines += command_markdown(group.get_command(ctx, name), f"prep {name}", ctx)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """mkdocs hook: fill docs/cli.md's marker."""
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown


if __name__ == "__main__":
    print(reference())
