"""Rows 39: data quality at pack time and likely label errors (issue 39).

- 39a: `prep pack` CPU seconds with its quality scores against `--no-quality`, same photos
  (the median of at least 5 interleaved runs; CPU time: the wall time of a shared machine sways
  more).
- 39b: confident learning (`prep labels`' label_issues) on N x 1000 random probabilities with
  5% of labels flipped, extrapolated linearly to 1,000,000 x 1,000 (its passes are linear in
  N x K), against the goal of 10 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from bench_dupes import wall_and_cpu
from bench_pack import jpeg_list
from rows import PREP, Row, versus


def overhead_rows(args: argparse.Namespace, work: Path) -> list[Row]:
    lst, paths = jpeg_list(work / "raw", args.count)
    common = ["--sizes", "256", "--overwrite", "-q", "-j", str(args.jobs)]
    runs = {
        "scored": [*PREP, "pack", str(lst), str(work / "quality-q"), *common],
        "plain": [*PREP, "pack", str(lst), str(work / "quality-n"), *common, "--no-quality"],
    }
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(1 if args.smoke else max(5, args.reps)):
        for k, cmd in runs.items():
            cpu[k].append(wall_and_cpu(cmd)[1])
    n = len(paths)
    return [
        versus(
            f"39a pack CPU, quality vs none, {n} img",
            statistics.median(cpu["scored"]),
            statistics.median(cpu["plain"]),
            "s",
            "<= 1.03x",
        )
    ]


def labels_rows(args: argparse.Namespace) -> list[Row]:
    from prep.inspect.labels import label_issues

    n, k = (20_000 if args.smoke else 200_000), 1000
    rng = np.random.default_rng(0)
    true = rng.integers(0, k, n)
    probs = rng.random((n, k), dtype=np.float32)
    probs[np.arange(n), true] += 0.5 * k / 2  # the true class the likeliest (p about 1/3)
    probs /= probs.sum(axis=1, keepdims=True)
    given = true.copy()
    flip = rng.random(n) < 0.05
    given[flip] = rng.integers(0, k, int(flip.sum()))
    start = time.perf_counter()
    label_issues(given, probs)
    seconds = (time.perf_counter() - start) * (1_000_000 / n)
    return [
        Row(
            "39b prep labels, 1M x 1000 (extrapolated)",
            seconds,
            10.0,
            "s",
            "<= 10 s",
            seconds <= 10,
        )
    ]


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    return [*overhead_rows(args, work), *labels_rows(args)]
