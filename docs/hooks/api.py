"""The API reference page, made at build time (mkdocs hook) from the public names of `loaders`
and `prep` (their `__all__`), each documented by mkdocstrings from its docstring where it is
defined: a name made public later appears without an edit here.

docs/api.md holds the page's introduction and the marker `<!-- api-reference -->`, which this
hook replaces with one `::: module.Name` directive per name. `python docs/hooks/api.py` prints
them.
"""

from __future__ import annotations

import importlib
from typing import Any

MARKER = "<!-- api-reference -->"
PACKAGES = {  # section title -> the module whose __all__ it documents
    "`loaders`: datasets and loading": "loaders",
    "`loaders.transforms`: augmentation on the batch": "loaders.transforms",
    "`prep`: packing from Python": "prep",
    "`prep.fields`: the fields of a sample": "prep.fields",
}


def public_names(package: str) -> list[tuple[str, str]]:
    """(name, where it is defined) of each public class or function of `package`, in
    `__all__`'s order; values (`__version__`) are left out."""
    module = importlib.import_module(package)
    out = []
    for name in module.__all__:
        obj = getattr(module, name)
        defined = getattr(obj, "__module__", None)
        if defined and callable(obj):
            out.append((name, defined))
    return out


def reference() -> str:
    lines, done = [], set()
    for title, package in PACKAGES.items():
        lines += [f"## {title}", ""]
        for name, where in public_names(package):
            if f"{where}.{name}" in done:  # exported twice (loaders.Normalize, T.Normalize)
                lines += [f"`{package}.{name}` is `{where}.{name}`, above.", ""]
                continue
            done.add(f"{where}.{name}")
            lines += [f"::: {where}.{name}", "    options:", "      heading_level: 3", ""]
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """mkdocs hook: fill docs/api.md's marker."""
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown


if __name__ == "__main__":
    print(reference())
