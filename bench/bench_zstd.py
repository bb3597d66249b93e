"""Rows 40a-40e: `--compress zstd` (issue 40). Disk size against the raw pack of the same
inputs (the demo's masks, a bytes-tokenized corpus, the packs' `source` text), and an epoch read
from the page cache against the raw pack's (each read once first): masks in batches of 64,
token windows in a shuffled order. Interleaved repeats, best of each.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rows import Row, info, prep, timed, versus


def size(root: Path, array: str) -> int:
    return sum(p.stat().st_size for p in root.glob(f"{array}-*.npy"))


def epoch(make: Callable[[], object], batch: int, shuffle: bool) -> Callable[[], None]:
    from loaders import make_loader

    def run() -> None:
        for _ in make_loader(make(), batch_size=batch, shuffle=shuffle, seed=0):  # type: ignore[arg-type]
            pass

    return run


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from bench import make_corpus  # bench/bench.py: the tokenize rows' corpus
    from loaders import ImageShardDataset, TokenWindowDataset

    raw, jobs = work / "raw", str(args.jobs)
    corpus = work / "corpus"
    make_corpus(raw, corpus, 200 if args.smoke else 8000)
    packs = {}
    for name, more in (("raw", []), ("zstd", ["--compress", "zstd"])):
        masks, tokens = work / f"z-masks-{name}", work / f"z-tokens-{name}"
        common = ["--overwrite", "-j", jobs, *more]
        prep("pack", str(raw / "images"), str(masks), "--masks", str(raw / "masks"), *common)
        prep("tokenize", str(corpus), str(tokens), "--tokenizer", "bytes", *common)
        packs[name] = masks, tokens
    (m_raw, t_raw), (m_zst, t_zst) = packs["raw"], packs["zstd"]
    mb = 1e6
    sizes = [
        ("40a masks on disk, zstd vs raw", size(m_zst, "mask_256"), size(m_raw, "mask_256")),
        ("40b tokens on disk, zstd vs raw", size(t_zst, "tokens"), size(t_raw, "tokens")),
        ("40c source text on disk, zstd vs raw", size(m_zst, "source"), size(m_raw, "source")),
    ]
    out = [versus(n, z / mb, r / mb, "MB", "<= 0.5x") for n, z, r in sizes]

    def masks(root: Path) -> Callable[[], None]:
        return epoch(lambda: ImageShardDataset(root, size=256, fields=("mask",)), 64, False)

    def windows(root: Path) -> Callable[[], None]:
        return epoch(lambda: TokenWindowDataset(root, block_size=512), 64, True)

    reads = {"m-raw": masks(m_raw), "m-zst": masks(m_zst)}
    reads |= {"t-raw": windows(t_raw), "t-zst": windows(t_zst)}
    for fn in reads.values():
        fn()  # into the page cache
    best = dict.fromkeys(reads, float("inf"))
    for _ in range(max(2, args.reps)):
        for key, fn in reads.items():
            best[key] = min(best[key], timed(fn))
    n_masks = len(ImageShardDataset(m_raw, size=256, fields=("mask",)))
    n_tokens = TokenWindowDataset(t_raw, block_size=512).num_tokens
    out.append(
        versus(
            "40d masks epoch, page cache, zstd vs raw",
            n_masks / best["m-zst"],
            n_masks / best["m-raw"],
            "masks/s",
            ">= 0.8x",
        )
    )
    out.append(
        versus(
            "40e token windows shuffled, page cache, zstd vs raw",
            n_tokens / best["t-zst"] / mb,
            n_tokens / best["t-raw"] / mb,
            "Mtok/s",
            ">= 0.8x",
        )
    )
    whole = (
        sum(p.stat().st_size for p in m_zst.iterdir()),
        sum(p.stat().st_size for p in m_raw.iterdir()),
    )
    out.append(
        info("40f image pack with masks on disk", whole[0] / mb, whole[1] / mb, "MB", "info")
    )
    return out
