"""Rows 37a and 37b (issue 37, datasets that grow).

37a: `--append` of 10% new photos onto a dataset of the other 90%, against a full repack of all
of them (goal: at most 0.15x its time). Both are timed in-process (`prep.kinds.images.pack`),
so that neither pays the ~0.5 s start-up of a `prep` process (row 30 measures that): the row
compares the work of an append with the work of a repack. The photos are the bench's demo
images (OUT/raw), linked into a folder of the dataset's inputs; each append runs on a
hard-linked copy of the same 90% dataset, interleaved with the repacks (5 of each); medians.

37b: `prep merge` of two 1 GiB datasets (raw uint8 arrays, 1 MiB a sample, written once per
bench folder by `pack_samples`) on one disk: no decode, the shards hard-linked, only the label
arrays of the second rewritten (its classes move). Goal: under 2 s, timed in-process as 37a;
an info row gives `prep merge` as a user runs it (a fresh process), beside the start-up of
`prep --version`, its floor."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
from pathlib import Path

import numpy as np
from rows import PREP, Row, info, run, timed, versus

OPTIONS = {"sizes": [256], "hashes": False}
PHOTOS = 400  # of the demo's: a full pack of them per repeat keeps `make bench` short
MIB = 1 << 20


def photos(raw: Path) -> list[Path]:
    return sorted(p for p in (raw / "images").rglob("*.jpg"))


def place(files: list[Path], raw: Path, src: Path) -> None:
    """`files` into `src` under their class folders, as hard links (no copy of the bytes)."""
    for f in files:
        dst = src / f.relative_to(raw / "images")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            os.link(f, dst)


def packed(src: Path, out: Path, jobs: int, **options: object) -> float:
    """Seconds of one `prep pack` in this process (its imports done by an earlier call)."""
    from prep.kinds.images.config import PackConfig
    from prep.kinds.images.pack import pack

    cfg = PackConfig(src=str(src), out=str(out), jobs=jobs, **options)  # type: ignore[arg-type]
    return timed(lambda: pack(cfg, show_progress=False))


def append_rows(args: argparse.Namespace, work: Path) -> list[Row]:
    raw, src, base = work / "raw", work / "grow-src", work / "p-grow-90"
    files = photos(raw)[:PHOTOS]
    old = [f for i, f in enumerate(files) if i % 10]  # every tenth photo arrives later
    shutil.rmtree(src, ignore_errors=True)
    place(old, raw, src)
    packed(src, base, args.jobs, overwrite=True, **OPTIONS)  # the 90%, once (and warm-up)
    place(files, raw, src)
    times: dict[str, list[float]] = {"append": [], "full": []}
    for _ in range(max(5, args.reps)):  # interleaved: the machine's load hits both alike
        out = work / "p-grow"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out, copy_function=os.link)  # the same 90% dataset each time
        times["append"].append(packed(src, out, args.jobs, append=True))
        full = work / "p-grow-full"
        times["full"].append(packed(src, full, args.jobs, overwrite=True, **OPTIONS))
    append, full = (statistics.median(times[k]) for k in ("append", "full"))
    name = f"37a append 10% ({len(files) - len(old)}) vs repack ({len(files)}), in-process"
    return [versus(name, append, full, "s", "<= 0.15x")]


def payload(i: int) -> dict[str, object]:
    return {"x": np.full(MIB, i % 251, np.uint8), "label": ("a", "b", "c")[i % 3]}


def big(out: Path, samples: int, classes: tuple[str, ...], jobs: int) -> None:
    """A dataset of `samples` MiB (raw arrays: the cheapest bytes to write), made once."""
    if (out / "manifest.json").is_file():
        return
    import prep as prep_api
    from prep.fields import Array, Label

    fields = {"x": Array("uint8", (MIB,)), "label": Label(classes)}
    prep_api.pack_samples(payload, list(range(samples)), out, fields, jobs=jobs, shard_size=64,
                          overwrite=True, show_progress=False)  # fmt: skip


def merge_rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from prep.kinds.grow.merge import merge

    samples = 16 if args.smoke else 1024  # 1 GiB each
    a, b = work / "m-team-a", work / "m-team-b"
    big(a, samples, ("a", "b", "c"), args.jobs)
    big(b, samples, ("c", "a", "b"), args.jobs)  # its ids move: its label arrays rewritten
    out = work / "m-merged"
    times: dict[str, list[float]] = {"cli": [], "merge": [], "start": []}
    for _ in range(max(3, args.reps)):  # interleaved
        shutil.rmtree(out, ignore_errors=True)
        times["merge"].append(timed(lambda: merge([a, b], out)))
        shutil.rmtree(out, ignore_errors=True)
        times["cli"].append(timed(lambda: run([*PREP, "merge", str(a), str(b), str(out)])))
        times["start"].append(timed(lambda: run([*PREP, "--version"])))
    took, cli, start = (statistics.median(times[k]) for k in ("merge", "cli", "start"))
    gib = 2 * samples * MIB / 2**30
    return [
        Row(f"37b merge 2 datasets, {gib:.1f} GiB, in-process", took, 2.0, "s", "< 2 s", took < 2),
        info("37b prep merge command (ref: prep --version)", cli, start, "s", "start-up"),
    ]


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    return append_rows(args, work) + merge_rows(args, work)
