"""Rows 35a-35c: a dataset of 1,000,000 shards (records only: the shard index of format version 4,
no shard files) opened by ImageShardDataset in a fresh process: the seconds it takes, the memory
it adds to a process that imported loaders and torch, and the bytes of the pickled dataset a
DataLoader worker receives. Each against its goal (issue 35: at most 1 s, 100 MB, 2 KB)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from rows import HERE, Row, versus

OPEN = """
import pickle, sys, time
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
from loaders import ImageShardDataset
import torch  # noqa: F401  (the loaders' own imports, before the baseline)
before = rss()
start = time.perf_counter()
ds = ImageShardDataset(sys.argv[1], size=8)
n = len(ds)
seconds = time.perf_counter() - start
print(seconds, rss() - before, len(pickle.dumps(ds)), n)
"""


def make(root: Path, shards: int) -> None:
    """The synthetic dataset (tests/test_index.py's `synthetic`: one shard's files, the rest
    records), made once and kept under bench/out."""
    stamp = root / ".done"
    if stamp.exists():
        return
    sys.path.insert(0, str(HERE.parent / "tests"))
    import shutil

    from test_index import synthetic  # type: ignore[import-not-found]

    shutil.rmtree(root, ignore_errors=True)
    synthetic(root, shards=shards, count=1000)
    stamp.touch()


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    shards = 10_000 if args.smoke else 1_000_000
    root = work / f"index-{shards}"
    make(root, shards)
    best = [float("inf")] * 3
    for _ in range(max(2, args.reps)):
        out = subprocess.run(
            [sys.executable, "-c", OPEN, str(root)], check=True, capture_output=True, text=True
        )
        seconds, mb, pickled, n = (float(x) for x in out.stdout.split())
        assert n == shards * 1000, n
        best = [min(a, b) for a, b in zip(best, (seconds, mb, pickled), strict=True)]
    manifest_kb = len(json.dumps(json.loads((root / "manifest.json").read_text()))) / 1e3
    print(f"index bench: {shards:,} shards, manifest.json {manifest_kb:.1f} KB", file=sys.stderr)
    return [
        versus(f"35a open {shards:,} shards (s, vs the 1 s goal)", best[0], 1.0, "s", "<= 1x"),
        versus(f"35b open {shards:,} shards: RAM added (MB)", best[1], 100.0, "MB", "<= 1x"),
        versus("35c pickled dataset (bytes, vs 2 KB)", best[2], 2048.0, "B", "<= 1x"),
    ]
