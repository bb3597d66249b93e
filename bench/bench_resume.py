"""Rows 36a-36d: a loader's state (issue 36). 36a, 36b: `state_dict()` mid-epoch at 1.28M
samples (ImageNet's count; a dataset of index batches: the state never reads samples), its
time and its JSON bytes (goals: under 1 ms, under 1 KB). 36c: a new loader's first batch after
`load_state_dict` of a mid-epoch state against a fresh loader's first batch, each with its
dataset opened anew (goal: at most 1.1x). 36d: an epoch through the loader (which counts the
batches it hands out) against the same loader's reading without the count (goal: >= 0.98x)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from rows import PREP, Row, run, timed, versus

from loaders import ImageShardDataset, make_loader
from loaders.read.readahead import read_ahead


class Indices(torch.utils.data.Dataset[Any]):
    """`n` samples, each its index: batches that cost nothing to read."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitems__(self, indices: list[int]) -> Any:
        return torch.as_tensor(indices)


def state_cost(n: int = 1_280_000, calls: int = 1000) -> tuple[float, int]:
    """Seconds a state_dict() takes mid-epoch (the median of `calls`), and its JSON bytes."""
    loader = make_loader(Indices(n), 256, shuffle=True, collate_fn=lambda b: b)
    it = iter(loader)
    for _ in range(20):
        next(it)
    loader.state_dict()  # the first computes the dataset's fingerprint, kept
    times = sorted(timed(loader.state_dict) for _ in range(calls))
    return times[calls // 2], len(json.dumps(loader.state_dict()))


def first_batch(root: Path, state: dict[str, Any] | None) -> float:
    start = time.perf_counter()
    loader = make_loader(ImageShardDataset(root, size=128), 64, shuffle=True, seed=1)
    if state is not None:
        loader.load_state_dict(state)
    next(iter(loader))
    return time.perf_counter() - start


def epoch(loader: Any, tracked: bool) -> float:
    return timed(lambda: [None for _ in (loader if tracked else read_ahead(loader))])


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    seconds, size = state_cost(12_800 if args.smoke else 1_280_000)
    out = [
        versus("36a state_dict() mid-epoch, 1.28M samples", seconds * 1e6, 1000, "us", "< 1x"),
        versus("36b its JSON bytes", size, 1024, "B", "< 1x"),
    ]
    root = work / "resume-p128"
    if not (root / "manifest.json").exists():
        run([*PREP, "pack", str(work / "raw" / "images"), str(root), "--sizes", "128", "-q"])
    loader = make_loader(ImageShardDataset(root, size=128), 64, shuffle=True, seed=1)
    it = iter(loader)
    for _ in range(min(5, len(loader) - 1)):
        next(it)
    state = loader.state_dict()
    del it
    fresh = resumed = tracked = untracked = float("inf")
    for _ in range(max(3, args.reps)):  # interleaved: the best of each
        fresh = min(fresh, first_batch(root, None))
        resumed = min(resumed, first_batch(root, state))
        untracked = min(untracked, epoch(loader, False))
        tracked = min(tracked, epoch(loader, True))
    n = len(loader.dataset)
    rate = "36d epoch with state tracking vs without"
    return [
        *out,
        versus("36c load_state_dict + first batch vs fresh", resumed, fresh, "s", "<= 1.1x"),
        versus(rate, n / tracked, n / untracked, "img/s", ">= 0.98x"),
    ]
