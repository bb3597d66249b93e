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

MB = 1e6


def size(root: Path, array: str) -> int:
    return sum(p.stat().st_size for p in root.glob(f"{array}-*.npy"))


def epoch(make: Callable[[], object], batch: int, shuffle: bool) -> Callable[[], None]:
    from loaders import make_loader

    def run() -> None:
        for _ in make_loader(make(), batch_size=batch, shuffle=shuffle, seed=0):  # type: ignore[arg-type]
            pass

    return run


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    packs = _packs(args, work)
    return [*_size_rows(packs), *_read_rows(args, packs), _whole_row(packs)]


Packs = dict[str, tuple[Path, Path]]  # "raw" or "zstd" -> its image pack (masks), its tokens


def _packs(args: argparse.Namespace, work: Path) -> Packs:
    """The demo's images with masks, and a bytes-tokenized corpus, packed raw and with zstd."""
    from bench import make_corpus  # bench/bench.py: the tokenize rows' corpus

    raw, jobs = work / "raw", str(args.jobs)
    corpus = work / "corpus"
    make_corpus(raw, corpus, 200 if args.smoke else 8000)
    packs: Packs = {}
    for name, more in (("raw", []), ("zstd", ["--compress", "zstd"])):
        masks, tokens = work / f"z-masks-{name}", work / f"z-tokens-{name}"
        common = ["--overwrite", "-j", jobs, *more]
        prep("pack", str(raw / "images"), str(masks), "--masks", str(raw / "masks"), *common)
        prep("tokenize", str(corpus), str(tokens), "--tokenizer", "bytes", *common)
        packs[name] = masks, tokens
    return packs


def _size_rows(packs: Packs) -> list[Row]:
    """40a-40c: each array's files on disk, zstd against raw."""
    (m_raw, t_raw), (m_zst, t_zst) = packs["raw"], packs["zstd"]
    sizes = [
        ("40a masks on disk, zstd vs raw", size(m_zst, "mask_256"), size(m_raw, "mask_256")),
        ("40b tokens on disk, zstd vs raw", size(t_zst, "tokens"), size(t_raw, "tokens")),
        ("40c source text on disk, zstd vs raw", size(m_zst, "source"), size(m_raw, "source")),
    ]
    return [versus(n, z / MB, r / MB, "MB", "<= 0.5x") for n, z, r in sizes]


def _read_rows(args: argparse.Namespace, packs: Packs) -> list[Row]:
    """40d, 40e: an epoch of masks and of shuffled token windows from the page cache; 40e in
    order="chunk_random" (a window of chunks at a time, each decompressed once an epoch), 40e'
    in order="random"; 40e'' and 40e''' the same with 8 MiB of chunks kept, as for a corpus
    larger than what a process keeps (these tokens: 21 MB; windows of 16 chunks)."""
    from loaders import ImageShardDataset, TokenWindowDataset, make_loader
    from loaders.format import kept

    (m_raw, t_raw), (m_zst, t_zst) = packs["raw"], packs["zstd"]

    def masks(root: Path) -> Callable[[], None]:
        return epoch(lambda: ImageShardDataset(root, size=256, fields=("mask",)), 64, False)

    def windows(root: Path, order: str, budget: int = kept.KEPT_BYTES) -> Callable[[], None]:
        def run() -> None:
            kept.KEPT_BYTES, was = budget, kept.KEPT_BYTES
            try:
                ds = TokenWindowDataset(root, block_size=512)
                for _ in make_loader(ds, batch_size=64, order=order, seed=0):
                    pass
            finally:
                kept.KEPT_BYTES = was

        return run

    reads = {"m-raw": masks(m_raw), "m-zst": masks(m_zst)}
    tokens = {"e": ("chunk_random", kept.KEPT_BYTES), "e'": ("random", kept.KEPT_BYTES)}
    tokens |= {"e''": ("chunk_random", 8 << 20), "e'''": ("random", 8 << 20)}
    for key, (order, budget) in tokens.items():
        reads |= {f"{key}-raw": windows(t_raw, order, budget)}
        reads |= {f"{key}-zst": windows(t_zst, order, budget)}
    for fn in reads.values():
        fn()  # into the page cache
    best = dict.fromkeys(reads, float("inf"))
    for _ in range(max(2, args.reps)):
        for key, fn in reads.items():
            best[key] = min(best[key], timed(fn))
    n_masks = len(ImageShardDataset(m_raw, size=256, fields=("mask",)))
    n_tokens = TokenWindowDataset(t_raw, block_size=512).num_tokens
    rows = [
        versus(
            "40d masks epoch, page cache, zstd vs raw",
            n_masks / best["m-zst"],
            n_masks / best["m-raw"],
            "masks/s",
            ">= 0.8x",
        )
    ]
    for key, (order, budget) in tokens.items():
        what = order if budget == kept.KEPT_BYTES else f"{order}, {budget >> 20} MiB kept"
        zst, raw = n_tokens / best[f"{key}-zst"] / MB, n_tokens / best[f"{key}-raw"] / MB
        name = f"40{key} token windows {what}, page cache, zstd vs raw"
        rows.append(
            versus(name, zst, raw, "Mtok/s", ">= 0.8x")
            if key == "e"
            else info(name, zst, raw, "Mtok/s", "info")
        )
    return rows


def _whole_row(packs: Packs) -> Row:
    """40f: the whole image pack (pixels, masks, metadata) on disk."""
    (m_raw, _), (m_zst, _) = packs["raw"], packs["zstd"]
    whole = (
        sum(p.stat().st_size for p in m_zst.iterdir()),
        sum(p.stat().st_size for p in m_raw.iterdir()),
    )
    return info("40f image pack with masks on disk", whole[0] / MB, whole[1] / MB, "MB", "info")
