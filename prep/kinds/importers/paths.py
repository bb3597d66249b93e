"""The paths a source file names stay inside the source's own tree, links resolved: someone
else's source could otherwise pack `~/.ssh/id_rsa` into a dataset the user publishes.
`--allow-outside` reads them anyway (a store of links: the HF hub cache, DVC, git-annex).

>>> Tree(Path("/data/coco/images")).why("a/../../x.png")[:46]
"'a/../../x.png' leads out of /data/coco/images"
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

HINT = "HINT: a source names files inside its own folder; --allow-outside reads them anyway"


@dataclass(frozen=True)
class Tree:
    """The folder a source's paths are relative to, and whether they may leave it."""

    root: Path
    allow_outside: bool = False

    @cached_property
    def real(self) -> Path:
        return self.root.resolve()

    def why(self, name: str, within: Path | None = None) -> str | None:
        """Why `name` (relative to `within`, a folder of the tree; default: its root) leaves the
        tree, with the HINT; None when it may be read. A name that cannot be resolved (a NUL
        byte, a link loop) is left to the file checks, which reject it."""
        if self.allow_outside:
            return None
        rel = name if within is None else os.path.join(os.path.relpath(within, self.root), name)
        if os.path.isabs(name):
            said = f"{name!r} is an absolute path"
        elif ".." in os.path.normpath(rel).split(os.sep):
            said = f"{name!r} leads out of {self.root} (..)"
        else:
            try:
                real = self._resolved(self.root / rel)
            except (OSError, RuntimeError, ValueError):  # RuntimeError: a link loop (< 3.13)
                return None
            if real == self.real or real.is_relative_to(self.real):
                return None
            said = f"{name!r} is a link to {real}, outside {self.root}"
        return f"{said}. {HINT}"

    @cached_property
    def _folders(self) -> dict[str, Path]:
        return {}

    def _resolved(self, path: Path) -> Path:
        """`path` with its links resolved: its folder once a tree (a COCO file's images share a
        few folders), then the file when it is a link: one lstat a file, not one a component."""
        if path.name in ("", ".", ".."):
            return path.resolve()
        folder = self._folders.get(str(path.parent))
        if folder is None:
            folder = self._folders[str(path.parent)] = path.parent.resolve()
        found = folder / path.name
        return found.resolve() if found.is_symlink() else found
