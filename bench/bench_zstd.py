"""Rows 40a-40f, 40i-40m: `--compress zstd` (issue 40). Disk size against the raw pack of the
same inputs (the demo's masks, a bytes-tokenized corpus, the packs' `source` text), and an epoch
read from the page cache against the raw pack's (each read once first): masks in batches of 64,
token windows in a shuffled order. Interleaved repeats, best of each. 40i-40m: the same masks and
tokens read from moto's S3 on loopback with an empty cache, through a proxy that throttles the
link (tests/s3server.py), and the bytes each epoch downloaded.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rows import HERE, Row, info, prep, timed, versus

sys.path.insert(0, str(HERE.parent / "tests"))  # the loopback servers the tests use
MB = 1e6
# The throttled link, bytes a second (160 Mbit/s: a shared office line, a bucket in another
# region). Well under what the loader reads raw masks and tokens at from the page cache (40d,
# 40e: about 1 GB/s and 140 MB/s on 2 cores) and what moto serves on loopback unthrottled
# (100-120 MB/s, one 20 MB GET): the link, not the server or the reader, sets the raw side's pace.
LINK = 20e6


def size(root: Path, array: str, offsets: bool = False) -> int:
    """Bytes of an array's shard files; `offsets`: with its offsets (raw in both packs)."""
    found = [p for p in root.glob(f"{array}-*.npy") if offsets or "-offsets-" not in p.name]
    return sum(p.stat().st_size for p in found)


def epoch(make: Callable[[], object], batch: int, shuffle: bool) -> Callable[[], None]:
    from loaders import make_loader

    def run() -> None:
        for _ in make_loader(make(), batch_size=batch, shuffle=shuffle, seed=0):  # type: ignore[arg-type]
            pass

    return run


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    packs = _packs(args, work)
    rows = [*_size_rows(packs), *_read_rows(args, packs), _whole_row(packs)]
    return rows + _s3_rows(args, packs, work)


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
    field = size(m_zst, "source", offsets=True), size(m_raw, "source", offsets=True)
    return [
        *(versus(n, z / MB, r / MB, "MB", "<= 0.5x") for n, z, r in sizes),
        info(
            "40c' source field with its offsets (raw in both)",
            *(b / MB for b in field),
            "MB",
            "info",
        ),
    ]


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


def _s3_rows(args: argparse.Namespace, packs: Packs, work: Path) -> list[Row]:
    """40i-40m: epochs from S3 with an empty cache at LINK bytes/s, the dataset's manifest read
    inside the clock: masks and token windows in order (40i, 40j), in order="chunk_random" (40k);
    the bytes each downloaded (40l, 40m). Interleaved, the best of each."""
    try:
        import moto.server  # noqa: F401  (the dev extra)
        import s3fs
        from s3server import moto_s3, throttled
    except ImportError:
        print("   (zstd: no moto[server]/s3fs: rows 40i-40m left out)", file=sys.stderr)
        return []
    from loaders import ImageShardDataset, TokenWindowDataset

    def masks(url: str, remote: dict[str, Any]) -> Any:
        return ImageShardDataset(url, size=256, fields=("mask",), **remote)

    def windows(url: str, remote: dict[str, Any]) -> Any:
        return TokenWindowDataset(url, block_size=512, **remote)

    reads: dict[str, tuple[Callable[[str, dict[str, Any]], Any], str, str]] = {}
    for name in packs:
        reads[f"m-{name}"] = masks, f"m-{name}", "sequential"
        reads[f"t-{name}"] = windows, f"t-{name}", "sequential"
        reads[f"s-{name}"] = windows, f"t-{name}", "chunk_random"
    best = dict.fromkeys(reads, float("inf"))
    down: dict[str, int] = {}
    with moto_s3() as endpoint:
        _upload(s3fs.S3FileSystem(skip_instance_cache=True), packs)
        for _ in range(max(1, args.reps)):
            for key, (make, folder, order) in reads.items():
                with throttled(int(endpoint.rsplit(":", 1)[1]), LINK) as proxy:
                    seconds = _cold_epoch(make, f"s3://zstd/{folder}", order, proxy.url, work)
                best[key], down[key] = min(best[key], seconds), proxy.down
    m_raw, t_raw = packs["raw"]
    n_masks = len(ImageShardDataset(m_raw, size=256, fields=("mask",)))
    mtok = TokenWindowDataset(t_raw, block_size=512).num_tokens / MB
    link = f"S3 at {LINK / MB:.0f} MB/s, cold cache"
    rate = {k: (n_masks if k[0] == "m" else mtok) / best[k] for k in best}
    return [
        versus(f"40i masks epoch, {link}, zstd vs raw", *_pair(rate, "m"), "masks/s", "> 1.0x"),
        versus(f"40j token windows, {link}, zstd vs raw", *_pair(rate, "t"), "Mtok/s", "> 1.0x"),
        info(
            f"40k token windows, chunk_random, {link}, zstd vs raw",
            *_pair(rate, "s"),
            "Mtok/s",
            "info",
        ),
        info("40l masks epoch from S3: downloaded", *_pair(down, "m", MB), "MB", "info"),
        info("40m token epoch from S3: downloaded", *_pair(down, "t", MB), "MB", "info"),
    ]


def _pair(values: Mapping[str, float], kind: str, unit: float = 1.0) -> tuple[float, float]:
    """(zstd, raw) of `kind`'s values, in `unit`."""
    return values[f"{kind}-zstd"] / unit, values[f"{kind}-raw"] / unit


def _upload(fs: Any, packs: Packs) -> None:
    """Each pack to s3://zstd/{m,t}-NAME, as `aws s3 cp --recursive` would (the image pack with
    its pixels: a dataset checks at open that its files are there)."""
    fs.mkdir("zstd")
    for name, (masks, tokens) in packs.items():
        fs.put(str(masks), f"zstd/m-{name}", recursive=True)
        fs.put(str(tokens), f"zstd/t-{name}", recursive=True)


def _cold_epoch(
    make: Callable[[str, dict[str, Any]], Any], url: str, order: str, endpoint: str, work: Path
) -> float:
    """Seconds for an epoch of `make(url, ...)` read through `endpoint`, its cache empty."""
    from loaders import make_loader

    cache = Path(tempfile.mkdtemp(dir=work))
    remote = {"cache_dir": cache, "storage_options": {"endpoint_url": endpoint}}

    def run() -> None:
        for _ in make_loader(make(url, remote), batch_size=64, order=order, seed=0):
            pass

    try:
        return timed(run)
    finally:
        shutil.rmtree(cache)
