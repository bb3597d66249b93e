"""Listing inputs the same way for every kind: sorted walks, lists, class folders, and a reject
record (docs/rejects.md) for what cannot be read."""

from __future__ import annotations

import csv
import errno
import json
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prep.run.errors import PrepError


def warn(message: str) -> None:
    """A warning line on stderr; the run goes on."""
    print(f"warning: {message}", file=sys.stderr)


def reject_record(rel: str, code: str, message: str) -> dict[str, Any]:
    return {"path": rel, "reason": code, "message": message}


def named_rejects(rejects: list[dict[str, Any]], reason: bool = True) -> str:
    """One or two rejects as "path: reason, message" (up to the HINT); "" for none or more.

    >>> named_rejects([{"path": "a.png", "reason": "missing", "message": "gone. HINT: ..."}])
    'a.png: missing, gone'
    """
    if not 0 < len(rejects) <= 2:
        return ""
    head = "{path}: {reason}, " if reason else "{path}, "
    return "; ".join(
        head.format_map(r) + r["message"].split(" HINT:")[0].rstrip(". ") for r in rejects
    )


def os_reject_code(e: OSError) -> str:
    """The reject code of a file the OS cannot give us."""
    if e.errno == errno.ELOOP:
        return "link_loop"
    if e.errno in (errno.ENOENT, errno.ENOTDIR):
        return "missing"  # vanished, or a link to nothing
    return "unreadable"


def bad_path(path: Path | str) -> str | None:
    """Why no file can have this name (a list can hold any string), or None. A lone surrogate
    other than U+DC80..U+DCFF (Python's undecodable bytes of a real name) has no bytes."""
    name = str(path)
    if "\0" in name:
        return "the path holds a NUL byte, which no file name can"
    try:
        os.fsencode(name)
    except UnicodeEncodeError as e:
        return f"the path holds U+{ord(name[e.start]):04X}, a lone surrogate no file name can"
    return None


def check_file(path: Path, rel: str) -> dict[str, Any] | None:
    """None for a regular file (links followed), else its reject; stat never opens (blocks) it."""
    return stat_file(path, rel)[0]


def stat_file(
    path: Path, rel: str, listed: bool = False
) -> tuple[dict[str, Any] | None, os.stat_result | None]:
    """check_file's reject, or None and the file's stat (links followed); `listed`: a name the
    OS listed (it has bytes: no bad_path)."""
    why = None if listed else bad_path(path)
    if why is not None:
        return reject_record(rel, "bad_path", f"{why}. HINT: fix the name in the list"), None
    try:
        st = os.stat(path)
    except OSError as e:
        code = os_reject_code(e)
        if code == "missing" and path.is_symlink():
            return reject_record(rel, "broken_link", f"link to nothing ({os.readlink(path)})"), None
        return reject_record(rel, code, f"cannot stat: {e.strerror}"), None
    if not stat.S_ISREG(st.st_mode):
        return reject_record(rel, "not_file", "not a regular file (FIFO, device or folder)"), None
    return None, st


def walk(
    root: Path,
    exts: frozenset[str] | Callable[[str], bool],
    stats: dict[str, os.stat_result] | None = None,
) -> tuple[list[tuple[str, Path]], list[dict[str, Any]]]:
    """Files under root with one of `exts` (or that the test `exts` keeps) as sorted (rel,
    path), and rejects; folder links are followed, each folder once (again: `link_loop`).
    `stats`: filled with each file's stat by its rel (the one stat a file of the walk)."""
    found: list[tuple[str, Path]] = []
    rejects: list[dict[str, Any]] = []
    seen: dict[tuple[int, int], str] = {}
    # Path(name).suffix, without a Path a file ("a." has none: no suffix is ".")
    keep = exts if callable(exts) else lambda name: os.path.splitext(name)[1].lower() in exts

    def rel_of(path: str | Path) -> str:
        return Path(path).relative_to(root).as_posix()

    def unlistable(e: OSError) -> None:
        rejects.append(
            reject_record(rel_of(e.filename), os_reject_code(e), f"cannot list: {e.strerror}")
        )

    for dirpath, dirnames, filenames in os.walk(root, onerror=unlistable, followlinks=True):
        here = rel_of(dirpath)
        try:
            st = os.stat(dirpath)
        except OSError as e:
            unlistable(e)
            dirnames[:] = []
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            rejects.append(
                reject_record(here, "link_loop", f"the folder {seen[key]!r} again, via a link")
            )
            dirnames[:] = []
            continue
        seen[key] = here
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        folder, prefix = Path(dirpath), "" if here == "." else here + "/"
        for name in filenames:
            if name.startswith(".") or not keep(name):
                continue
            path, rel = folder / name, prefix + name  # (rel_of's, without a Path a file)
            problem, found_st = stat_file(path, rel, listed=True)
            if problem is not None:
                rejects.append(problem)
            elif found_st is not None:
                found.append((rel, path))
                if stats is not None:
                    stats[rel] = found_st
    found.sort()
    rejects.sort(key=lambda r: r["path"])
    return found, rejects


class Reject(Exception):
    """An input that cannot be used; `code` is one of docs/rejects.md's reject codes."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# An integer in a list or CSV: ASCII only ("²" and "٣" pass str.isdigit, and int() takes "٣").
INTEGER = re.compile(r"-?[0-9]+")


def load_json(data: str | bytes, where: str) -> Any:
    """The JSON value of `data`, else a PrepError naming `where` (huge integers, deep nests)."""
    try:
        return json.loads(data)
    except ValueError as e:  # JSONDecodeError, bad UTF-8, huge integers
        raise PrepError(f"{where}: cannot read it as JSON ({e})") from None
    except RecursionError:
        raise PrepError(f"{where}: cannot read it as JSON (nested too deep)") from None


def read_rows(src: Path) -> list[tuple[int, Any]]:
    """(line number where it ends, row) of every row of a CSV (header first) or JSONL list."""
    hint = ". HINT: a CSV with a header row or JSON lines with a 'path' key"
    try:
        with open(src, newline="", encoding="utf-8-sig") as f:
            if src.suffix.lower() == ".csv":
                reader = csv.DictReader(f)
                return [(reader.line_num, row) for row in reader]
            rows = []
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append((n, load_json(line, f"{src}:{n}")))
                    except PrepError as e:
                        raise PrepError(f"{e}{hint}") from None
            return rows
    except (OSError, ValueError, csv.Error) as e:  # ValueError: bad UTF-8
        raise PrepError(f"{src}: cannot read the list ({e}){hint}") from e


def class_folders(
    files: list[tuple[str, Path]], what: str
) -> tuple[list[tuple[str, Path, int | None]], list[str] | None, list[dict[str, Any]]]:
    """Labels from class sub-folders, as ImageFolder: (rel, path, label), the sorted class
    names (None without), and a `no_class` reject for each `what` beside the class folders."""
    classes = sorted({rel.split("/", 1)[0] for rel, _ in files if "/" in rel})
    if not classes:
        return [(rel, path, None) for rel, path in files], None, []
    label_of = {c: i for i, c in enumerate(classes)}
    labelled: list[tuple[str, Path, int | None]] = [
        (rel, p, label_of[rel.split("/", 1)[0]]) for rel, p in files if "/" in rel
    ]
    why = f"{what} beside class folders: move it into one, or list it in a CSV"
    strays = [reject_record(rel, "no_class", why) for rel, _ in files if "/" not in rel]
    return labelled, classes, strays
