"""Packed sequences (issue 38): how full best_fit packs against greedy and against packing the
whole split at once, how long an epoch's plan takes, and how fast PackedDataset loads against
TokenWindowDataset.

    python bench/bench.py --only packing
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
from rows import PREP, Row, info, run, versus

SEQ_LEN = 2048


def lognormal_lengths(n: int, seq_len: int, seed: int = 0) -> np.ndarray:
    """Document lengths: median seq_len / 10, 20% longer than seq_len (z(0.8) = 0.8416), cut at
    32 * seq_len so that a few giants do not dominate."""
    sigma = math.log(10) / 0.8416
    lengths = np.random.default_rng(seed).lognormal(math.log(seq_len / 10), sigma, n)
    return np.clip(lengths, 1, 32 * seq_len).astype(np.int64)


def efficiency(p: object, seq_len: int) -> float:
    """Non-pad tokens over all tokens of the packed sequences."""
    from loaders.packing import Plan

    assert isinstance(p, Plan)
    return p.tokens() / (len(p) * seq_len)


def bench_efficiency(docs: int) -> list[Row]:
    from loaders.packing import plan

    lengths = lognormal_lengths(docs, SEQ_LEN)
    best = efficiency(plan(lengths, SEQ_LEN, "best_fit"), SEQ_LEN)
    whole = efficiency(plan(lengths, SEQ_LEN, "best_fit", window=None), SEQ_LEN)
    greedy = efficiency(plan(lengths, SEQ_LEN, "greedy"), SEQ_LEN)
    name = f"38a packing efficiency, best_fit vs whole split ({docs:,} docs, seq {SEQ_LEN})"
    return [
        versus(name, best, whole, "", ">= 0.99x"),
        info(
            f"38b packing efficiency, best_fit vs greedy ({docs:,} docs)", best, greedy, "", "info"
        ),
    ]


def bench_planning(docs: int, reps: int) -> Row:
    from loaders.packing import plan

    lengths = lognormal_lengths(docs, SEQ_LEN, seed=1)
    best = math.inf
    for epoch in range(reps):  # the best of reps: the machine is shared
        start = time.perf_counter()
        plan(lengths, SEQ_LEN, "best_fit", seed=0, epoch=epoch)
        best = min(best, time.perf_counter() - start)
    return versus(f"38c best_fit plan of an epoch, {docs:,} docs (vs 2 s)", best, 2.0, "s", "<= 1x")


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
    out.append(bench_planning(20_000 if smoke else 1_000_000, args.reps))
    out.append(bench_loading(work, 2_000 if smoke else 30_000, args.reps))
    return out
