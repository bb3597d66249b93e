"""Row 37a: `prep pack --append` of 10% new photos onto a dataset of the other 90%, against a
full repack of all of them (issue 37: at most 0.15x its time). The photos are the bench's demo
images (bench/out/raw), linked into a folder of the dataset's inputs."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from rows import Row, prep, versus

OPTIONS = ["--sizes", "256", "--no-hashes"]
PHOTOS = 400  # of the demo's: two full packs of them per repeat keep `make bench` short


def photos(raw: Path) -> list[Path]:
    return sorted(p for p in (raw / "images").rglob("*.jpg"))


def place(files: list[Path], raw: Path, src: Path) -> None:
    """`files` into `src` under their class folders, as hard links (no copy of the bytes)."""
    for f in files:
        dst = src / f.relative_to(raw / "images")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            os.link(f, dst)


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    raw, src = work / "raw", work / "grow-src"
    files = photos(raw)[:PHOTOS]
    old = [f for i, f in enumerate(files) if i % 10]  # every tenth photo arrives later
    jobs = ["-j", str(args.jobs)]
    best = {"append": float("inf"), "full": float("inf")}
    for _ in range(min(2, max(1, args.reps))):
        shutil.rmtree(src, ignore_errors=True)
        place(old, raw, src)
        out = str(work / "p-grow")
        prep("pack", str(src), out, *OPTIONS, *jobs, "--overwrite")
        place(files, raw, src)
        best["append"] = min(best["append"], prep("pack", str(src), out, "--append", *jobs))
        full = str(work / "p-grow-full")
        best["full"] = min(
            best["full"], prep("pack", str(src), full, *OPTIONS, *jobs, "--overwrite")
        )
    name = f"37a append 10% ({len(files) - len(old)} photos) vs full repack ({len(files)})"
    return [versus(name, best["append"], best["full"], "s", "<= 0.15x")]
