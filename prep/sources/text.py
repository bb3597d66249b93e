"""`prep tokenize --glob`: text files chosen by name (by relative path for a pattern holding "/"),
read as `.txt` files (one document a file, a line with --split-lines), `.jsonl` as JSON lines."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any

from prep.media.text.documents import JSONL_EXTS, Piece
from prep.run.config import listed
from prep.run.errors import PrepError
from prep.run.inputs import check_file, os_reject_code, reject_record, walk


def matches(rel: str, pats: list[str]) -> bool:
    """Whether a file's path relative to SRC matches a pattern (by its name, or its path).

    >>> matches("lib/a.py", ["*.py"]), matches("lib/a.py", ["lib/*.md"]), matches("a.md", ["*.MD"])
    (True, False, False)
    """
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(rel if "/" in p else name, p) for p in pats)


def list_matching(
    src: Path, glob: str, split_lines: bool
) -> tuple[list[Piece], list[dict[str, Any]]]:
    """The files of SRC that --glob matches, sorted, and rejects for the unreadable."""
    pats = listed(glob, "--glob", str)  # '*.py, *.md' -> ['*.py', '*.md']
    if not pats:
        raise PrepError(f"--glob {glob!r} holds no pattern. HINT: e.g. --glob '*.py,*.md'")
    if not src.exists():
        raise PrepError(f"{src} does not exist. HINT: pass a folder of text files, or one file")
    line_mode = "lines" if split_lines else "file"
    if src.is_file():
        if not matches(src.name, pats):
            raise PrepError(f"{src} does not match --glob {glob!r}. HINT: fix the pattern")
        files, rejects = [(src.name, src)], list[dict[str, Any]]()
    else:
        files, rejects = walk(src, lambda name: True)
        files = [(rel, p) for rel, p in files if matches(rel, pats)]
        rejects = [r for r in rejects if r["reason"] == "link_loop" or matches(r["path"], pats)]
    found: list[Piece] = []
    for rel, path in files:  # each file one input, or its reject
        problem = check_file(path, rel)
        if problem is None and not os.access(path, os.R_OK):  # planning reads line files
            problem = reject_record(rel, "unreadable", "cannot read: no read permission")
        try:
            size = path.stat().st_size if problem is None else 0
        except OSError as e:  # gone since it was listed
            problem = reject_record(rel, os_reject_code(e), f"cannot stat: {e.strerror}")
        if problem is not None:
            rejects.append(problem)
            continue
        mode = "jsonl" if path.suffix.lower() in JSONL_EXTS else line_mode
        found.append(Piece(str(path), rel, 0, size, mode))
    found.sort(key=lambda p: p.rel)
    rejects.sort(key=lambda r: str(r["path"]))
    return found, rejects
