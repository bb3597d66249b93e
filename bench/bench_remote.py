"""Rows 9a-9e: datasets at a URL (issue 15), against real servers on loopback.

The demo images packed at 128 px (shards of 64) three ways: locally, and with `prep pack` to
moto's S3 server on 127.0.0.1 (the dev extra; AWS_* test credentials, nothing else reached).
9a/9b: an epoch (sequential, 0 workers, batch 256) from S3 with an empty cache, then from the
cache, against the local copy; 9e: a first epoch from S3 in order quasi_random, with and without
the next window's prefetch. An epoch of the demo is a tenth of a second, too short to time
alone on a shared machine: 9b times PASSES fresh loaders back to back, after a warm-up pass of
each side, interleaved, the best of each side. 9c/9d: 8 processes reading every sample through
one cache from an http.server that counts GETs: downloads per file (goal: exactly one) and
corrupt reads.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_load import epoch_rate
from rows import HERE, PREP, Row, info, run, timed, versus

from loaders.format import read_manifest

sys.path.insert(0, str(HERE.parent / "tests"))  # the loopback servers the tests use
READERS = 8
PASSES = 4  # fresh loaders read back to back: one sample of 9b


def _loader(root: str | Path, cache: Path) -> Any:
    from loaders import ImageShardDataset, make_loader

    remote = {"cache_dir": cache} if "://" in str(root) else {}
    ds = ImageShardDataset(root, size=128, fields=("image", "label"), **remote)
    return make_loader(ds, batch_size=256, order="sequential")


def _checksum(root: str, cache: str) -> int:
    """Sum of every pixel of the dataset, read through `cache` (one reader process)."""
    return int(sum(int(images.sum()) for images, _ in _loader(root, Path(cache))))


def _s3_rows(local: Path, raw: Path, work: Path, samples: int) -> list[Row]:
    from s3fs import S3FileSystem
    from s3server import moto_s3

    with moto_s3():
        S3FileSystem(skip_instance_cache=True).mkdir("bench")
        url = "s3://bench/p128"
        cmd = [*PREP, "pack", str(raw / "images"), url, "--sizes", "128", "--shard-size", "64"]
        upload_s = timed(lambda: run([*cmd, "--staging", str(work / "staging"), "-q"]))
        cache = Path(tempfile.mkdtemp(dir=work))
        first = epoch_rate(_loader(url, cache))  # the cache empty: every file downloaded
        cached, ref = _best_rates(url, local, cache, samples)
        shutil.rmtree(cache)
        ahead, on_use = 0.0, 0.0
        for _ in range(1 if samples == 1 else 2):  # interleaved, the best of each
            ahead = max(ahead, _first_epoch(url, work, follow=True))
            on_use = max(on_use, _first_epoch(url, work, follow=False))
    print(f"   (remote: prep pack to S3 on loopback took {upload_s:.1f} s)", file=sys.stderr)
    return [
        info("9a epoch 1 from loopback S3 vs local copy", first, ref, "img/s", "info"),
        versus("9b epoch 2 from the cache vs local copy", cached, ref, "img/s", ">= 0.9x"),
        info("9e epoch 1 quasi_random: prefetch vs none", ahead, on_use, "img/s", "info"),
    ]


def _first_epoch(url: str, work: Path, follow: bool) -> float:
    """img/s of a first epoch from S3 in order quasi_random (windows of 4 shards), with the next
    window fetched ahead (`follow`), or each file fetched when first read."""
    from loaders import ImageShardDataset, make_loader

    cache = Path(tempfile.mkdtemp(dir=work))
    ds = ImageShardDataset(url, size=128, fields=("image", "label"), cache_dir=cache)
    loader = make_loader(ds, batch_size=256, order="quasi_random", window=4)
    if not follow:
        loader.sampler.on_window = None  # the sampler shares nothing: no prefetch
    rate = epoch_rate(loader)
    shutil.rmtree(cache)
    return rate


def _passes_rate(root: str | Path, cache: Path, passes: int) -> float:
    """img/s over `passes` fresh loaders read back to back (made before the clock starts: a
    dataset reads its manifest when made, a request to the server)."""
    loaders = [_loader(root, cache) for _ in range(passes)]
    n, start = 0, time.perf_counter()
    for loader in loaders:
        n += sum(len(images) for images, _ in loader)
    return n / (time.perf_counter() - start)


def _best_rates(url: str, local: Path, cache: Path, reps: int) -> tuple[float, float]:
    """The best rate of each side, cached and local, over `reps` interleaved samples."""
    passes = 1 if reps == 1 else PASSES
    _passes_rate(url, cache, 1), _passes_rate(local, cache, 1)  # warm-up: page cache, imports
    cached, ref = 0.0, 0.0
    for _ in range(reps):
        cached = max(cached, _passes_rate(url, cache, passes))
        ref = max(ref, _passes_rate(local, cache, passes))
    return cached, ref


def _shared_cache_rows(local: Path, work: Path, readers: int = READERS) -> list[Row]:
    from s3server import http_server

    cache = Path(tempfile.mkdtemp(dir=work))
    expected = _checksum(str(local), str(cache))
    with http_server(local) as (url, starts), mp.get_context("spawn").Pool(readers) as pool:
        sums = pool.starmap(_checksum, [(url, str(cache))] * readers)
    shutil.rmtree(cache)
    m = read_manifest(local)
    # The cache is keyed by content: files with equal bytes (labels of a one-class shard) are
    # one download
    files = {s.files[s.arrays[a].file].sha256 for s in m.shards for a in ("image_128", "label")}
    files |= {n for n in ("shards.npy", "sha256.npy") if n in starts}  # the shard index: files too
    gets = sum(starts.values()) - starts["manifest.json"]
    corrupt = sum(s != expected for s in sums)
    return [
        Row(
            f"9c {readers} readers, one cache: GETs per distinct file",
            gets / len(files),
            1.0,
            "GET",
            "exactly 1",
            gets == len(files),
        ),
        Row(
            f"9d {readers} readers, one cache: corrupt of reads",
            corrupt,
            readers,
            "reads",
            "0 corrupt",
            corrupt == 0,
        ),
    ]


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    local = work / "p128-remote-local"
    raw = work / "raw"
    if not (local / "manifest.json").is_file():
        run(
            [
                *PREP,
                "pack",
                str(raw / "images"),
                str(local),
                "--sizes",
                "128",
                "--shard-size",
                "64",
                "--overwrite",
                "-q",
            ]
        )
    readers = 2 if args.smoke else READERS  # the smoke run checks the script, briefly
    try:
        import moto.server  # noqa: F401  (the dev extra)
        import s3fs  # noqa: F401
    except ImportError:
        print("   (remote: no moto[server]/s3fs: rows 9a-9b left out)", file=sys.stderr)
        return _shared_cache_rows(local, work, readers)
    samples = 1 if args.smoke else max(7, 3 * args.reps)  # of 9b, interleaved
    return _s3_rows(local, raw, work, samples) + _shared_cache_rows(local, work, readers)
