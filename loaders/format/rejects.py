"""rejects.jsonl read back (the report, tests), untrusted: a regular file in the folder, a
bounded read, each line checked to be `{"path": str, "reason": str, "message": str}`.

>>> record(b'{"path": "a.png", "reason": "corrupt"}')
{'path': 'a.png', 'reason': 'corrupt', 'message': ''}
>>> record(b'[1, 2]') is None
True
"""

from __future__ import annotations

import itertools
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from loaders.format.arrays import safe_path
from loaders.format.schema import REJECTS, FormatError

MAX_LINE = 1 << 16  # bytes: a record is a path, a reason and a one-line message
MAX_BYTES = 256_000_000  # bytes read at most: about a million records
SHOWN = 5  # bad line numbers named


def record(line: bytes) -> dict[str, str] | None:
    """One line's reject record, or None where it is not one."""
    try:
        r = json.loads(line)
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError too), nested too deep
        return None
    if not isinstance(r, dict):
        return None
    got = {k: r.get(k, "" if k == "message" else None) for k in ("path", "reason", "message")}
    text = {k: v for k, v in got.items() if isinstance(v, str)}
    return text if len(text) == len(got) else None


def records(root: Path, problems: list[str]) -> Iterator[dict[str, str]]:
    """The reject records of `root`; then `problems` holds a line on what was not read."""
    try:
        path = safe_path(root, REJECTS)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except (FormatError, OSError) as e:
        problems.append(f"{REJECTS} not read: {e}")
        return
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            problems.append(f"{REJECTS} not read: {path} is not a regular file")
            return
        bad: list[int] = []  # the first SHOWN bad line numbers
        done = count = 0
        for n in itertools.count(1):
            if done >= MAX_BYTES and f.peek(1):
                problems.append(f"{REJECTS}: only its first {MAX_BYTES / 1e6:,.0f} MB read")
                break
            line = f.readline(MAX_LINE + 1)
            if not line:
                break
            done += len(line)
            long = len(line) > MAX_LINE
            while long and line and not line.endswith(b"\n") and done < MAX_BYTES:
                # the rest of a line past MAX_LINE: skipped, never held
                line = f.readline(MAX_LINE)
                done += len(line)
            got = None if long else record(line)
            if got is not None:
                yield got
            elif long or line.strip():
                count += 1
                bad += [n] if len(bad) < SHOWN else []
    if count:
        shown = ", ".join(map(str, bad)) + (" ..." if count > SHOWN else "")
        lines = f"{count} lines of {REJECTS} are" if count > 1 else f"line {shown} of {REJECTS} is"
        problems.append(
            f"{lines} not reject records"
            + (f" (lines {shown})" if count > 1 else "")
            + "; the counts leave them out. HINT: prep writes one JSON object a line there"
        )


def iter_rejects(root: Path) -> Iterator[dict[str, str]]:
    """The reject records of a dataset (or run) folder; lines that are none are passed over."""
    yield from records(Path(root), [])
