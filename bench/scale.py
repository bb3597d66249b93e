"""`make bench-scale`: a rehearsal at ImageNet's shape (issue 30): 1,281,167 generated 32 px raw
images in 1,000 classes, packed by `prep.pack_samples` on a local Dask cluster of 2 workers and
with threads, then opened, pickled, verified, sampled at 8 ranks, read, and served from moto's
S3 server. Each measure is printed with its bound; the table goes into the README.

    python bench/scale.py                 # the whole rehearsal (under 20 minutes on 2 cores)
    python bench/scale.py --scale 0.01    # 1% of the images: develop with this
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import pickle
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rows import HERE, PREP, run, timed

IMAGES, CLASSES, SIDE = 1_281_167, 1_000, 32
RANKS, BATCH = 8, 256
Result = tuple[str, float, str, str]  # measure, value, unit, bound ("" for none)


def make(i: int) -> dict[str, Any]:
    """Sample `i`: a 32 px image (its class's colour, a gradient, and `i` in its first pixel:
    no two samples, and so no two shard files, are the same bytes, which a content-addressed
    cache would fetch once) and its class, hashed from `i` (consecutive samples' classes would
    make every shard's labels the same file). Module-level, so that the Dask workers get it
    (pickled by value from a script's __main__)."""
    label = (i * 2654435761) % 2**32 % CLASSES
    img = np.empty((SIDE, SIDE, 3), np.uint8)
    img[...] = (label % 256, (label * 7) % 256, (i * 13) % 256)
    img[:, :, 2] += np.arange(SIDE, dtype=np.uint8)
    img[0, 0] = (i >> 16) & 255, (i >> 8) & 255, i & 255
    return {"image": img, "label": label}


def folder_rate(tmp: Path, n: int = 3000) -> float:
    """Files/s writing a folder tree of 32 px PNGs (what `prep pack` would read): the other way
    to make the inputs, measured on a sample."""
    import cv2

    shutil.rmtree(tmp, ignore_errors=True)
    start = time.perf_counter()
    for i in range(n):
        d = tmp / f"c{i % CLASSES:04d}"
        if i < CLASSES:
            d.mkdir(parents=True)
        cv2.imwrite(str(d / f"{i:07d}.png"), make(i)["image"])
    os.sync()  # the files on disk, as a tree of 1.28M would have to be
    rate = n / (time.perf_counter() - start)
    shutil.rmtree(tmp, ignore_errors=True)
    return rate


def pack(out: Path, n: int, backend: str) -> float:
    """Seconds for pack_samples of the first n images into `out` on 2 workers of `backend`."""
    from prep.fields import Image, Label
    from prep.kinds.samples.pack import pack_samples

    fields = {"image": Image(sizes=(SIDE,)), "label": Label()}
    start = time.perf_counter()
    pack_samples(
        make, list(range(n)), out, fields, jobs=2, backend=backend, overwrite=True,
        show_progress=False,
    )  # fmt: skip
    return time.perf_counter() - start


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.suffix == ".npy")


def bare_sha256(root: Path) -> float:
    def digest() -> None:
        for p in files_of(root):
            with open(p, "rb") as f:
                hashlib.file_digest(f, "sha256")

    return timed(digest)


def opening(root: Path) -> list[Result]:
    from loaders import SampleDataset

    manifest = (root / "manifest.json").stat().st_size
    open_s = min(timed(lambda: SampleDataset(root)) for _ in range(3))
    pickled = len(pickle.dumps(SampleDataset(root)))
    sha = min(bare_sha256(root) for _ in range(2))
    verify = min(timed(lambda: run([*PREP, "verify", str(root)])) for _ in range(2))
    info = min(timed(lambda: run([*PREP, "info", str(root)])) for _ in range(2))
    return [
        ("manifest size", manifest / 1e6, "MB", ""),
        ("dataset open (SampleDataset(root))", open_s, "s", "<= 1 s"),
        ("pickled dataset", pickled / 1e3, "KB", "<= 2 KB"),
        ("prep verify", verify, "s", f"<= 1.2x sha256 ({1.2 * sha:.1f} s)"),
        ("bare sha256 of the shard files", sha, "s", ""),
        ("prep info", info, "s", ""),
    ]


def ranks(root: Path) -> list[Result]:
    """Each of 8 ranks' quasi_random sampler made alone: every sample once across them."""
    import tracemalloc

    from loaders import SampleDataset
    from loaders.read.samplers import ShardSampler

    sizes = SampleDataset(root).shard_sizes
    seen = np.zeros(sum(sizes), np.int64)
    peak, start = 0, time.perf_counter()
    for rank in range(RANKS):
        tracemalloc.start()
        sampler = ShardSampler(
            sizes, "quasi_random", seed=0, num_replicas=RANKS, rank=rank, drop_last=True
        )
        idx = np.fromiter(iter(sampler), np.int64)
        peak = max(peak, tracemalloc.get_traced_memory()[1] - idx.nbytes)
        tracemalloc.stop()
        np.add.at(seen, idx, 1)
    # drop_last: the n % 8 samples past the last whole round wait for the next epoch
    once = seen.max() == 1 and int((seen == 1).sum()) == len(seen) - len(seen) % RANKS
    return [
        ("8 ranks' samplers: samples seen once", float(once), "bool", "1 (all once)"),
        ("a rank's sampler, peak memory", peak / 1e6, "MB", ""),
        ("8 samplers made and iterated", time.perf_counter() - start, "s", ""),
    ]


def epoch(root: Path) -> list[Result]:
    """First batch latency of a fresh dataset, then a quasi_random epoch: RSS and open files."""
    import psutil

    from loaders import SampleDataset, make_loader

    me = psutil.Process()
    start = time.perf_counter()
    ds = SampleDataset(root)
    it = iter(make_loader(ds, batch_size=BATCH, order="quasi_random"))
    next(it)
    first = time.perf_counter() - start
    mem0, fds0, n, peak_fds = me.memory_info(), me.num_fds(), 0, 0
    start = time.perf_counter()
    for n, _ in enumerate(it, 2):
        if n % 50 == 0:
            peak_fds = max(peak_fds, me.num_fds())
    rate = n * BATCH / (time.perf_counter() - start)
    mem = me.memory_info()
    growth = (mem.rss - mem0.rss) / 2**20
    # Anonymous pages: the process's own memory. The rest of RSS is the shard files' pages
    # mapped (page cache, shared and reclaimable), up to max_open maps.
    anon = ((mem.rss - mem.shared) - (mem0.rss - mem0.shared)) / 2**20
    return [
        ("first batch (fresh dataset and loader)", first, "s", "<= 0.5 s"),
        ("quasi_random epoch, 0 workers", rate, "img/s", ""),
        ("RSS growth over the epoch, anonymous", anon, "MB", "<= 64 MB"),
        ("RSS growth over the epoch, with mapped shard pages", growth, "MB", "info"),
        ("open files after the first batch", fds0, "fds", ""),
        ("open files, most during the epoch", max(peak_fds, me.num_fds()), "fds", ""),
    ]


@contextlib.contextmanager
def serve_s3() -> Iterator[tuple[Any, Counter[str]]]:
    """moto's S3 server on loopback (as tests/s3server.py starts it), its GETs counted per
    path; yields an s3fs file system with bucket prep-scale, and the counts."""
    import s3fs
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line a request
    gets: Counter[str] = Counter()
    app = DomainDispatcherApplication(create_backend_app)

    def counting(environ: dict[str, Any], respond: Any) -> Any:
        if environ["REQUEST_METHOD"] == "GET":
            gets[environ["PATH_INFO"]] += 1
        return app(environ, respond)

    server = make_server("127.0.0.1", 0, counting, True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.server_address[1]}",
    }
    env["MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"] = str(2**20)  # objects over 1 MB spill to disk
    os.environ.update(env)  # what s3fs and the loaders' fsspec read, as a user's AWS config
    try:
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir("prep-scale")
        yield fs, gets
    finally:
        server.shutdown()
        thread.join()


def s3(root: Path, work: Path) -> list[Result]:
    """The dataset on moto's S3 server: a first epoch's GETs per file, and an epoch under a
    cache_limit of a tenth of the dataset."""
    from loaders import SampleDataset, make_loader

    files = [root / "manifest.json", *files_of(root)]
    size = sum(p.stat().st_size for p in files)
    out: list[Result] = []
    with serve_s3() as (fs, gets):
        start = time.perf_counter()
        fs.put([str(p) for p in files], "prep-scale/ds/")
        out.append(("upload to moto (s3fs put)", time.perf_counter() - start, "s", ""))
        for name, limit in (("first epoch", None), ("cache_limit = 1/10", size // 10)):
            cache = work / f"cache-{limit}"
            shutil.rmtree(cache, ignore_errors=True)
            gets.clear()
            start = time.perf_counter()
            ds = SampleDataset("s3://prep-scale/ds", cache_dir=cache, cache_limit=limit)
            for _ in make_loader(ds, batch_size=BATCH, order="quasi_random"):
                pass
            took = time.perf_counter() - start
            held = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
            counts = [gets[f"/prep-scale/ds/{p.name}"] for p in files[1:]]
            out += [
                (f"S3 {name}: epoch", took, "s", ""),
                (f"S3 {name}: GETs a shard file, fewest", min(counts), "GETs", "1"),
                (f"S3 {name}: GETs a shard file, most", max(counts), "GETs", "1"),
                (
                    f"S3 {name}: cache held after",
                    held / 1e6,
                    "MB",
                    f"<= {limit / 1e6:.0f} MB" if limit else "no limit",
                ),
            ]
    return out


def table(results: list[Result]) -> str:
    lines = ["| measure | value | unit | bound |", "|---|---|---|---|"]
    for name, value, unit, bound in results:
        shown = f"{value:.3g}" if value < 1000 else f"{value:,.0f}"
        lines.append(f"| {name} | {shown} | {unit} | {bound} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="share of ImageNet's 1,281,167")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "scale")
    ap.add_argument("--no-s3", action="store_true", help="skip the moto S3 measures")
    args = ap.parse_args()
    n = max(CLASSES, round(IMAGES * args.scale))
    work = args.out / f"n{n}"
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    results: list[Result] = [("images (32 px raw, 1,000 classes)", n, "", "")]
    tree = folder_rate(work / "tree")
    results.append(("a folder tree of 32 px PNGs, written", tree, "files/s", "info"))
    root = work / "dask"
    t_dask = pack(root, n, "dask")
    # Dask against threads on the same tenth of the samples, back to back: packing the whole
    # twice more would double the rehearsal's longest step
    m = max(CLASSES, n // 10)
    t_part = {b: pack(work / f"part-{b}", m, b) for b in ("dask", "threads")}
    for b in t_part:
        shutil.rmtree(work / f"part-{b}")
    results += [
        ("pack, Dask LocalCluster of 2 workers", n / t_dask, "img/s", ""),
        (f"pack {m:,}: Dask, 2 workers", m / t_part["dask"], "img/s", ""),
        (f"pack {m:,}: 2 threads", m / t_part["threads"], "img/s", ""),
    ]
    shards = len(files_of(root)) // 2
    results.append(("shards (npy: image and label each)", shards, "", ""))
    for part in (opening, ranks, epoch):
        results += part(root)
        print(table(results), file=sys.stderr)  # so far: a run stopped early still tells
    if not args.no_s3:
        results += s3(root, work)
    total = time.perf_counter() - start
    results.append(("the whole rehearsal", total / 60, "min", "<= 20 min"))
    print(f"\nprep bench-scale: {n} images, {os.cpu_count()} cores\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
