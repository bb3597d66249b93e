"""Packed sequences (issue 38): how full best_fit packs against greedy and against packing the
whole split at once, how long an epoch's plan takes, and how fast PackedDataset loads against
TokenWindowDataset.

    python bench/bench.py --only packing
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import numpy as np
from rows import PREP, Row, info, run, versus

SEQ_LEN = 2048


def lognormal_lengths(n: int, seq_len: int, seed: int = 0) -> np.ndarray:
    """Document lengths as issue 38 says: lognormal, median seq_len / 10, 20% longer than
    seq_len (sigma = ln 10 / z(0.8)), uncut (a few are 10^5 seq_len long). Rounded up:
    ceil(x) > seq_len exactly when x > seq_len, and every document has a token."""
    sigma = math.log(10) / statistics.NormalDist().inv_cdf(0.8)
    lengths = np.random.default_rng(seed).lognormal(math.log(seq_len / 10), sigma, n)
    return np.ceil(lengths).astype(np.int64)


def efficiency(p: object, seq_len: int, pieces: bool = False) -> float:
    """Non-pad tokens over all tokens of the packed sequences (`pieces`: of those that hold
    documents' last pieces, not one whole seq_len of a document)."""
    from loaders.packing import Plan

    assert isinstance(p, Plan)
    fill = np.add.reduceat(p.length, p.starts[:-1])
    if pieces:
        fill = fill[(np.diff(p.starts) > 1) | (p.length[p.starts[:-1]] < seq_len)]
    return int(fill.sum()) / (len(fill) * seq_len)


def bench_efficiency(docs: int) -> list[Row]:
    from loaders.packing import plan

    lengths = lognormal_lengths(docs, SEQ_LEN)
    plans = {
        "best_fit": plan(lengths, SEQ_LEN, "best_fit"),
        "whole": plan(lengths, SEQ_LEN, "best_fit", window=None),
        "greedy": plan(lengths, SEQ_LEN, "greedy"),
    }
    full = {k: efficiency(p, SEQ_LEN) for k, p in plans.items()}
    # Whole sequences (most tokens here) are full under any strategy: the sequences of last
    # pieces are where the strategies differ
    part = {k: efficiency(p, SEQ_LEN, pieces=True) for k, p in plans.items()}
    name = f"38a packing efficiency, best_fit vs whole split ({docs:,} docs, seq {SEQ_LEN})"
    piece = "38b the pieces' sequences only: best_fit vs"
    return [
        versus(name, full["best_fit"], full["whole"], "", ">= 0.99x"),
        info(
            f"38b best_fit vs greedy ({docs:,} docs)", full["best_fit"], full["greedy"], "", "info"
        ),
        info(f"{piece} greedy", part["best_fit"], part["greedy"], "", "info"),
        info(f"{piece} whole split", part["best_fit"], part["whole"], "", "info"),
    ]


def bench_planning(docs: int, reps: int) -> list[Row]:
    """An epoch's plan as a loader makes it, reps (at least 5) epochs: the median and the
    slowest, each against 2 s (the slowest too: a worker plans each epoch)."""
    from loaders.packing import plan

    lengths = lognormal_lengths(docs, SEQ_LEN, seed=1)
    times = []
    for epoch in range(max(reps, 5)):
        start = time.perf_counter()
        plan(lengths, SEQ_LEN, "best_fit", seed=0, epoch=epoch)
        times.append(time.perf_counter() - start)
    name = f"38c best_fit plan of an epoch, {docs:,} docs, {{}} of {len(times)} (vs 2 s)"
    return [
        versus(name.format("median"), statistics.median(times), 2.0, "s", "<= 1x"),
        versus(name.format("slowest"), max(times), 2.0, "s", "<= 1x"),
    ]


def corpus(path: Path, docs: int) -> None:
    """`docs` lines of letters and spaces, lognormal lengths (median 100 bytes)."""
    rng = np.random.default_rng(2)
    lengths = lognormal_lengths(docs, 1000, seed=2).clip(1, 20_000)
    alphabet = np.frombuffer(b"abcdefghij klmnop", np.uint8)
    with open(path, "w") as f:
        for n in lengths.tolist():
            f.write(alphabet[rng.integers(0, len(alphabet), n)].tobytes().decode() + "\n")


def rate(ds: object, batch: int, reps: int) -> float:
    """Tokens a second over one pass of make_loader(shuffle) (inputs: batch * seq)."""
    from loaders import make_loader

    best = 0.0
    for _ in range(reps):
        loader = make_loader(ds, batch, shuffle=True)  # type: ignore[arg-type]
        start, tokens = time.perf_counter(), 0
        for b in loader:
            x = b["input_ids"] if isinstance(b, dict) else b[0]
            tokens += x.numel()
        best = max(best, tokens / (time.perf_counter() - start))
    return best


def bench_loading(work: Path, docs: int, reps: int) -> Row:
    from loaders import PackedDataset, TokenWindowDataset

    src, out = work / "packing-corpus.txt", work / "packing-tokens"
    if not out.exists():
        corpus(src, docs)
        run([*PREP, "tokenize", str(src), str(out), "--split-lines", "--val-fraction", "0", "-q"])
    seq = 1024
    ours = rate(PackedDataset(out, seq), 16, reps)
    ref = rate(TokenWindowDataset(out, seq), 16, reps)
    return versus(
        f"38d PackedDataset vs TokenWindowDataset (seq {seq})", ours, ref, "tok/s", ">= 0.8x"
    )


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    smoke = args.smoke
    out = bench_efficiency(2_000 if smoke else 100_000)
    out += bench_planning(20_000 if smoke else 1_000_000, args.reps)
    out.append(bench_loading(work, 2_000 if smoke else 30_000, args.reps))
    return out
