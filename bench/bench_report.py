"""Rows 28r-28s: `prep report` of the bench's photos packed at 256 px (the pack rows' JPEG
list), its time against that `prep pack`'s on the same machine in the same run, and the size
of the page it writes against the dataset's.

Both are run as a user runs them (a fresh process each, so the report pays its imports),
interleaved, best of --reps.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_pack import jpeg_list
from rows import Row, info, prep, versus

SIZE = 256


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    lst, paths = jpeg_list(work / "raw", args.count)
    out = work / "report-p256"
    page = work / "report-p256.html"
    packs, reports = [], []
    for _ in range(args.reps):
        common = ["-j", str(args.jobs), "--overwrite", "--sizes", str(SIZE)]
        packs.append(prep("pack", str(lst), str(out), *common))
        reports.append(prep("report", str(out), "--out", str(page)))
    pack_s, report_s = min(packs), min(reports)
    disk = sum(p.stat().st_size for p in out.glob("*.npy"))
    n = len(paths)
    return [
        versus(f"28r report vs pack, {n} img at {SIZE}px", report_s, pack_s, "s", "<= 0.25x"),
        info(
            "28s report file vs the dataset",
            page.stat().st_size / 1e6,
            disk / 1e6,
            "MB",
            "one self-contained HTML page",
        ),
    ]
