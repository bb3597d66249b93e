"""Rows 1-3 and 6a: `prep pack` against a bare decode+resize loop (PIL draft + cv2 INTER_AREA)
at three input counts and the naive PIL LANCZOS loop that users write by hand, on the same
cores, and the pack workers' peak memory."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rows import PREP, Row, child_peak_rss_mb, prep, versus


def naive_one(path: str, out: str, size: int) -> None:
    """What a user writes by hand: PIL open, convert, LANCZOS resize, np.save."""
    from PIL import Image

    with Image.open(path) as im:
        arr = np.asarray(im.convert("RGB").resize((size, size), Image.Resampling.LANCZOS))
    np.save(out, arr)


def bare_one(path: str, size: int) -> None:
    """A bare decode+resize with no I/O but the read (issue 12's reference loop): Pillow's
    DCT-reduced decode (`draft`), then OpenCV's area resize to the size."""
    import cv2
    from PIL import Image

    cv2.setNumThreads(1)
    with Image.open(path) as im:
        im.draft("RGB", (size, size))
        arr = np.asarray(im.convert("RGB"))
    cv2.resize(arr, (size, size), interpolation=cv2.INTER_AREA)


def bare_chunk(paths: list[str], size: int) -> int:
    for p in paths:
        bare_one(p, size)
    return len(paths)


def naive_chunk(paths: list[str], out: str, size: int) -> int:
    for i, p in enumerate(paths):
        naive_one(p, f"{out}/{Path(p).stem}-{i}.npy", size)
    return len(paths)


def parallel_rate(fn: Callable[..., int], chunks: list[tuple[Any, ...]], jobs: int) -> float:
    """Images per second of fn over chunks on `jobs` loky workers (workers started beforehand)."""
    from joblib import Parallel, delayed

    with Parallel(n_jobs=jobs, backend="loky") as par:
        par(delayed(os.getpid)() for _ in range(jobs))  # warm the pool: not part of the rate
        start = time.perf_counter()
        n = sum(par(delayed(fn)(*c) for c in chunks))
        return n / (time.perf_counter() - start)


def chunked(paths: list[str], n: int) -> list[list[str]]:
    return [paths[i : i + n] for i in range(0, len(paths), n)]


def jpeg_list(raw: Path, count: int, of: int | None = None) -> tuple[Path, list[str]]:
    """A CSV of the first `count` JPEGs of the demo (the bench packs photos, not PNGs); with
    `of`, `count` of those first `of` spread evenly (the same mix of photo sizes)."""
    paths = sorted(p for p in (raw / "images").rglob("*.jpg"))[: of or count]
    if of is not None:
        paths = paths[:: max(1, len(paths) // count)][:count]
    lst = raw / (f"jpegs-{count}-of-{of}.csv" if of else "jpegs.csv")
    rows = [f"{p.relative_to(raw).as_posix()},{p.parent.name}\n" for p in paths]
    lst.write_text("path,label\n" + "".join(rows))
    return lst, [str(p) for p in paths]


# Row id -> inputs packed: the full count (the dataset the load rows read), then the small runs
# where one shard per 1,000 inputs left a core idle (issue 12). Goals against the bare loop
# (issue 30: at 180 photos a fixed start-up of about half a second counts).
BARE_ROWS = {"1b": (None, ">= 1.15x"), "1c": (720, ">= 1.2x"), "1d": (180, ">= 0.9x")}


def bench_pack(raw: Path, work: Path, jobs: int, sample: int, count: int, reps: int) -> list[Row]:
    lists = {}
    for row, (n, _) in BARE_ROWS.items():
        n = count if n is None else min(n, count)
        lists[row] = jpeg_list(raw, n, None if n == count else count)
    lst, paths = lists["1b"]
    print(f"   (pack: {len(paths)} JPEGs listed in {lst})", file=sys.stderr)

    def pack(src: Path, out: str, sizes: str, *options: str) -> float:
        # The default shard size; fill (the default mode) named: the bare loop's resize is a
        # square's, and the rows compare the centre crop of each photo.
        common = ["-j", str(jobs), "--overwrite", "--sizes", sizes, "--mode", "fill"]
        return prep("pack", str(src), str(work / out), *common, *options)

    sub = paths[:: max(1, len(paths) // sample)]  # spread over the classes and file kinds
    naive_dir = work / "naive"
    shutil.rmtree(naive_dir, ignore_errors=True)
    naive_dir.mkdir(parents=True)
    # Interleaved repeats, best of each: a noisy neighbour slows one run, not the comparison.
    # Rates, and times negated, so that the best is the largest of each.
    runs: dict[str, list[float]] = {k: [] for k in ("naive", "multi", "512", "gray")}
    for _ in range(reps):
        for row, (src, files) in lists.items():
            out = "p256" if row == "1b" else f"p256-{len(files)}"
            runs.setdefault(row, []).append(len(files) / pack(src, out, "256"))
            bare = [(c, 256) for c in chunked(files, 8)]
            runs.setdefault(f"bare{row}", []).append(parallel_rate(bare_chunk, bare, jobs))
        naive = [(c, str(naive_dir), 256) for c in chunked(sub, 8)]
        runs["naive"].append(parallel_rate(naive_chunk, naive, jobs))
        runs["multi"].append(-pack(lst, "pmulti", "128,256,512"))
        runs["512"].append(-pack(lst, "p512", "512"))
        runs["gray"].append(-pack(lst, "pgray", "256", "--gray"))
    best = {k: max(v) for k, v in runs.items()}
    ours = best["1b"]
    rows = [
        versus("1a pack 256px vs naive PIL LANCZOS loop", ours, best["naive"], "img/s", ">= 4x")
    ]
    for row, (_, goal) in BARE_ROWS.items():
        name = f"{row} pack 256px vs bare loop, {len(lists[row][1])} img"
        rows.append(versus(name, best[row], best[f"bare{row}"], "img/s", goal))
    return [
        *rows,
        versus("2  pack 128+256+512 vs 512 only", -best["multi"], -best["512"], "s", "<= 1.25x"),
        versus("3  pack gray vs rgb (256px)", -best["gray"], len(paths) / ours, "s", "< 1x"),
    ]


def bench_pack_memory(raw: Path, work: Path, sample: int) -> Row:
    """Run first, while this process is small: a child's peak RSS counts what it had before
    exec, a copy of ours."""
    lst, _ = jpeg_list(raw, sample)
    rss = {}
    for shard in (256, 4096):
        out = str(work / f"rss{shard}")
        options = ["--sizes", "256", "-j", "1", "-q", "--overwrite", "--shard-size", str(shard)]
        rss[shard] = child_peak_rss_mb([*PREP, "pack", str(lst), out, *options])
    name = "6a pack worker peak RSS, shard 4096 vs 256"
    return versus(name, rss[4096], rss[256], "MB", "<= 1.1x")
