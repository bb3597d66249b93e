"""Rows 30a-30b: start-up. `prep --help` and a one-image `prep pack`, wall time of a fresh
process each, against `python -c "import numpy"` (the least any prep command imports).

A user pays this on every command, and it is most of a small run: at 180 photos it is a third
of the pack. Interleaved repeats, best of each (the machine is shared).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rows import PREP, Row, run, timed, versus


def one_image_list(raw: Path) -> Path:
    """A CSV of the demo's first JPEG, by absolute path."""
    first = sorted((raw / "images").rglob("*.jpg"))[0]
    lst = raw / "jpegs-one.csv"
    lst.write_text(f"path,label\n{first.resolve()},{first.parent.name}\n")
    return lst


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    lst = one_image_list(work / "raw")
    out = str(work / "p-one")
    commands = {
        "numpy": [sys.executable, "-c", "import numpy"],
        "help": [*PREP, "--help"],
        "pack": [*PREP, "pack", str(lst), out, "--sizes", "256", "--overwrite", "-q", "-j", "1"],
    }
    best = dict.fromkeys(commands, float("inf"))
    for _ in range(max(3, args.reps)):  # short commands: a few more repeats than the default
        for name, cmd in commands.items():
            best[name] = min(best[name], timed(lambda cmd=cmd: run(cmd)))
    return [
        versus("30a prep --help vs import numpy", best["help"], best["numpy"], "s", "<= 3x"),
        versus("30b pack one image vs import numpy", best["pack"], best["numpy"], "s", "<= 3x"),
    ]
