"""`make bench`: prep against its baselines, measured side by side in one run, as ratios.

Machines here are shared and noisy: absolute times drift, ratios measured in the same run hold.
Each row prints our figure, the reference figure, the ratio and the goal. Data comes from
`prep demo` at benchmark scale and is cached under bench/out/ between runs.

    python bench/bench.py                 # the full table (under 10 minutes on 2 cores)
    python bench/bench.py --smoke         # a tiny run that checks the script works (CI)
"""

from __future__ import annotations

import argparse
import importlib
import operator
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
PREP = [str(Path(sys.executable).parent / "prep")]  # the installed console script


@dataclass
class Row:
    name: str
    ours: float
    ref: float
    unit: str
    goal: str
    met: bool | None

    @property
    def ratio(self) -> float:
        return self.ours / self.ref if self.ref else float("nan")


GOALS = {">=": operator.ge, "<=": operator.le, "<": operator.lt}


def versus(name: str, ours: float, ref: float, unit: str, goal: str) -> Row:
    """A row whose goal is a ratio of ours to ref, e.g. ">= 3x": met when the ratio meets it."""
    op, target = goal.split()
    return Row(name, ours, ref, unit, goal, GOALS[op](ours / ref, float(target.rstrip("x"))))


def info(name: str, ours: float, ref: float, unit: str, note: str) -> Row:
    return Row(name, ours, ref, unit, note, None)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=True, text=True, capture_output=True, **kw)


def prep(*args: str) -> float:
    """Seconds for one `prep` command, run as a user runs it (a fresh process)."""
    return timed(lambda: run([*PREP, *args, "-q"]))


def child_peak_rss_mb(args: list[str]) -> float:
    """Peak RSS of a child process (MB), from the kernel's accounting of that child alone."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{args} failed: {proc.stderr.read() if proc.stderr else ''}")
    return usage.ru_maxrss / 1024


# ------------------------------------------------------------------------------ references


def naive_one(path: str, out: str, size: int) -> None:
    """What a user writes by hand: PIL open, convert, resize, np.save."""
    from PIL import Image

    with Image.open(path) as im:
        arr = np.asarray(im.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))
    np.save(out, arr)


def bare_one(path: str, size: int) -> None:
    """The fastest decode+resize we know with no I/O but the read: DCT-reduced decode, then the
    cheapest resize that reaches the size (bilinear under 2x: see
    prep.kinds.images.decode.resize)."""
    import cv2
    from PIL import Image

    cv2.setNumThreads(1)
    with Image.open(path) as im:
        im.draft("RGB", (size, size))
        arr = np.asarray(im.convert("RGB"))
    cv2.resize(arr, (size, size), interpolation=cv2.INTER_LINEAR)


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


class FolderDataset:
    """torchvision ImageFolder's work per sample: PIL decode, convert, resize, to tensor."""

    def __init__(self, paths: list[str], size: int):
        self.paths, self.size = paths, size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Any:
        import torch
        from PIL import Image

        with Image.open(self.paths[i]) as im:
            im = im.convert("RGB").resize((self.size, self.size), Image.Resampling.BILINEAR)
        return torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1), 0


# ------------------------------------------------------------------------------ measures


def jpeg_list(raw: Path, count: int) -> tuple[Path, list[str]]:
    """A CSV of the first `count` JPEGs of the demo (the bench packs photos, not PNGs)."""
    paths = sorted(p for p in (raw / "images").rglob("*.jpg"))[:count]
    lst = raw / "jpegs.csv"
    rows = [f"{p.relative_to(raw).as_posix()},{p.parent.name}\n" for p in paths]
    lst.write_text("path,label\n" + "".join(rows))
    return lst, [str(p) for p in paths]


def bench_pack(raw: Path, work: Path, jobs: int, sample: int, count: int, reps: int) -> list[Row]:
    lst, paths = jpeg_list(raw, count)
    print(f"   (pack: {len(paths)} JPEGs listed in {lst})", file=sys.stderr)

    def pack(out: str, sizes: str, *options: str) -> float:
        common = ["-j", str(jobs), "--overwrite", "--shard-size", "256", "--sizes", sizes]
        return prep("pack", str(lst), str(work / out), *common, *options)

    sub = paths[:: max(1, len(paths) // sample)]  # spread over the classes and file kinds
    naive_dir = work / "naive"
    shutil.rmtree(naive_dir, ignore_errors=True)
    naive_dir.mkdir(parents=True)
    # Interleaved repeats, best of each: a noisy neighbour slows one run, not the comparison.
    # Rates, and times negated, so that the best is the largest of each.
    runs: dict[str, list[float]] = {k: [] for k in ("ours", "bare", "naive", "multi", "512")}
    runs["gray"] = []
    for _ in range(reps):
        runs["ours"].append(len(paths) / pack("p256", "256"))
        runs["bare"].append(parallel_rate(bare_chunk, [(c, 256) for c in chunked(paths, 32)], jobs))
        naive = [(c, str(naive_dir), 256) for c in chunked(sub, 16)]
        runs["naive"].append(parallel_rate(naive_chunk, naive, jobs))
        runs["multi"].append(-pack("pmulti", "128,256,512"))
        runs["512"].append(-pack("p512", "512"))
        runs["gray"].append(-pack("pgray", "256", "--gray"))
    ours, naive_rate, bare = max(runs["ours"]), max(runs["naive"]), max(runs["bare"])
    t_multi, t_512, t_gray = (-max(runs[k]) for k in ("multi", "512", "gray"))
    return [
        versus("1a pack 256px vs naive PIL loop", ours, naive_rate, "img/s", ">= 3x"),
        versus("1b pack 256px vs bare decode+resize", ours, bare, "img/s", ">= 0.85x"),
        versus("2  pack 128+256+512 vs 512 only", t_multi, t_512, "s", "<= 1.25x"),
        versus("3  pack gray vs rgb (256px)", t_gray, len(paths) / ours, "s", "< 1x"),
    ]


def epoch_rate(loader: Any) -> float:
    n = 0
    start = time.perf_counter()
    for batch in loader:
        n += len(batch[0])
    return n / (time.perf_counter() - start)


def bench_load(raw: Path, work: Path, sample: int) -> list[Row]:
    import torch

    from loaders import ImageShardDataset, make_loader

    ds = ImageShardDataset(work / "p256", size=256, fields=("image", "label"))
    rows = []
    data_bytes = len(ds) * 256 * 256 * 3
    src = np.concatenate(
        [np.load(p, mmap_mode="r") for p in sorted((work / "p256").glob("image_256-*.npy"))]
    )
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm
    t_copy = min(timed(lambda: np.copyto(dst, src)) for _ in range(3))
    copy_rate = len(ds) / t_copy
    paths = sorted(str(p) for p in (raw / "images").rglob("*.*"))[:sample]
    folder = FolderDataset(paths, 256)
    for workers in (0, 2):
        loader = make_loader(ds, batch_size=256, shuffle=True, num_workers=workers)
        epoch_rate(loader)  # warm: page cache, worker start-up
        ours = max(epoch_rate(loader) for _ in range(2))
        ref_loader = torch.utils.data.DataLoader(
            folder, batch_size=64, shuffle=True, num_workers=workers
        )
        ref = epoch_rate(ref_loader)
        name = f"load, {workers} workers, vs"
        rows.append(versus(f"4a {name} ImageFolder+PIL", ours, ref, "img/s", ">= 20x"))
        rows.append(versus(f"4b {name} np.copyto", ours, copy_rate, "img/s", ">= 0.5x"))
    print(f"   (load: {len(ds)} samples, {data_bytes / 1e6:.0f} MB per epoch)", file=sys.stderr)
    rows.append(worker_batch_cost(src[:256]))
    return rows


def worker_batch_cost(batch: np.ndarray) -> Row:
    """Where a DataLoader worker's time goes for one batch: making fresh shared memory for it
    and faulting its pages in (what torch's worker protocol needs per batch), against the copy
    of the pixels into memory that is already there."""
    import torch

    out = np.empty_like(batch)
    np.copyto(out, batch)

    def fresh() -> None:
        storage = torch.UntypedStorage._new_shared(batch.nbytes)
        torch.empty(0, dtype=torch.uint8).set_(storage).numpy().fill(0)

    t_fresh = min(timed(fresh) for _ in range(5))
    t_copy = min(timed(lambda: np.copyto(out, batch)) for _ in range(5))
    name = "4c worker batch: fresh shared memory vs copy"
    return info(name, t_fresh * 1e3, t_copy * 1e3, "ms", "info (why 4b)")


def make_corpus(raw: Path, corpus: Path, docs: int) -> None:
    """`docs` documents cut from the demo texts, of 1 to 7 copies each."""
    if corpus.exists():
        return
    corpus.mkdir(parents=True)
    base = [t.read_text(encoding="utf-8") for t in sorted((raw / "text").glob("*.txt"))]
    for i in range(docs):
        text = base[i % len(base)] * (1 + i % 7)
        (corpus / f"{i:05d}.txt").write_text(text, encoding="utf-8")


def bench_tokenize(raw: Path, work: Path, jobs: int, docs: int, reps: int) -> list[Row]:
    """`prep tokenize --tokenizer bpe` with a given tokenizer vs tokenizers' encode_batch."""
    from tokenizers import Tokenizer

    corpus = work / "corpus"
    make_corpus(raw, corpus, docs)

    def tokenize(out: str, tokenizer: str, *options: str) -> float:
        common = ["-j", str(jobs), "--overwrite", "--tokenizer", tokenizer]
        return prep("tokenize", str(corpus), str(work / out), *common, *options)

    tokenize("tok-train", "bpe", "--vocab-size", "2048")
    tok_file = work / "tok-train" / "tokenizer.json"
    n_bytes = sum(p.stat().st_size for p in corpus.glob("*.txt"))
    n_tokens = 0

    def direct() -> None:
        """The reference: read the same files, encode_batch with the same tokenizer."""
        nonlocal n_tokens
        tok = Tokenizer.from_file(str(tok_file))
        docs = [p.read_text(encoding="utf-8") for p in sorted(corpus.glob("*.txt"))]
        n_tokens = sum(len(e.ids) for e in tok.encode_batch(docs))

    t_ours, t_ref = float("inf"), float("inf")
    for _ in range(reps):  # interleaved, best of each
        t_ours = min(t_ours, tokenize("tok", str(tok_file)))
        t_ref = min(t_ref, timed(direct))
    t_bytes = tokenize("tok-bytes", "bytes")
    rate, ref = n_tokens / t_ours, n_tokens / t_ref
    mb_ours, mb_ref = n_bytes / t_bytes / 1e6, n_bytes / t_ref / 1e6
    note = "info (ref: bpe encode_batch)"
    return [
        versus("5a tokenize bpe vs encode_batch", rate, ref, "tok/s", ">= 0.8x"),
        info("5b tokenize bytes (MB/s of text)", mb_ours, mb_ref, "MB/s", note),
    ]


def private_mb(pid: int) -> float:
    """Memory a process has written to itself (Private_Dirty, over all its mappings): what a
    worker costs beyond the page cache and the pages it shares with its parent. Not psutil's
    uss, which adds clean private pages: shard pages that only this worker has mapped."""
    return sum(m.private_dirty for m in psutil.Process(pid).memory_maps(grouped=True)) / 2**20


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


def bench_loader_memory(work: Path) -> Row:
    from loaders import ImageShardDataset, make_loader

    ds = ImageShardDataset(work / "p256", size=256, fields=("image", "label"))
    loader = make_loader(ds, batch_size=256, shuffle=True, num_workers=2)
    per_epoch = []
    for _ in range(5):
        for _batch in loader:
            pass
        # Persistent workers: the same processes every epoch (a private attribute, bench only).
        per_epoch.append(sum(private_mb(w.pid) for w in loader._iterator._workers))
    first, last = per_epoch[0], per_epoch[-1]
    name = "6b 2 loader workers' private memory, epoch 5 vs 1"
    return Row(name, last, first, "MB", "<= 1.1x", last <= 1.1 * first + 5)  # 5 MB: noise


def table(rows: list[Row]) -> str:
    head = (
        f"| {'measure':<48} | {'ours':>10} | {'reference':>10} | unit  | ratio | goal     | met |"
    )
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in sorted(rows, key=lambda r: r.name):
        met = {True: "yes", False: "NO", None: "-"}[r.met]
        lines.append(
            f"| {r.name:<48} | {r.ours:>10.1f} | {r.ref:>10.1f} | {r.unit:<5} | "
            f"{r.ratio:>5.2f} | {r.goal:<8} | {met:<3} |"
        )
    return "\n".join(lines)


def demo_data(raw: Path, count: int, smoke: bool, jobs: int) -> None:
    """The demo dataset at benchmark scale, made once and kept (bench/out/)."""
    stamp = raw / ".done"
    if stamp.exists():
        return
    shutil.rmtree(raw, ignore_errors=True)
    max_side = "1024" if smoke else "4032"
    demo_count = count * 8 // 7 + 16  # 1 in 8 demo files is a PNG: not packed here
    options = ["--count", str(demo_count), "--max-side", max_side, "-j", str(jobs), "-q"]
    run([*PREP, "demo", str(raw), *options])
    stamp.touch()


# Rows of other data kinds, each in a module of its own beside this file (bench/NAME.py) with
# `rows(args, work) -> list[Row]`; `--only GROUP` picks them like the built-in groups.
GROUPS: dict[str, str] = {"table": "bench_table", "augment": "bench_augment"}
GROUPS["volumes"] = "bench_volumes"  # bench/bench_volumes.py
GROUPS["remote"] = "bench_remote"  # bench/bench_remote.py: S3 and HTTP on loopback
GROUPS["train"] = "bench_train"  # bench/bench_train.py: a training loop fed three ways


def measure(args: argparse.Namespace, raw: Path, work: Path) -> list[Row]:
    """The rows `--only` asks for. Pack makes the datasets that load and memory read."""
    rows: list[Row] = []
    only = args.only.split(",")
    if "memory" in only:
        rows.append(bench_pack_memory(raw, work, args.sample))
    if "pack" in only or "load" in only or "memory" in only:
        rows += bench_pack(raw, work, args.jobs, args.sample, args.count, args.reps)
    if "load" in only:
        rows += bench_load(raw, work, args.sample)
    if "tokenize" in only:
        rows += bench_tokenize(raw, work, args.jobs, 200 if args.smoke else 8000, args.reps)
    if "memory" in only:
        rows.append(bench_loader_memory(work))
    for group, module in GROUPS.items():
        if group in only:
            rows += importlib.import_module(module).rows(args, work)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=2000, help="demo images to pack")
    slow = "images for the slow references (their rate is per image)"
    ap.add_argument("--sample", type=int, default=300, help=slow)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=2, help="interleaved repeats; the best counts")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: check the script runs")
    ap.add_argument("--only", default=",".join(["pack", "load", "tokenize", "memory", *GROUPS]))
    args = ap.parse_args()
    if args.smoke:
        args.count, args.sample, args.reps, args.out = 24, 12, 1, args.out / "smoke"
    work = args.out / f"n{args.count}"
    start = time.perf_counter()
    demo_data(work / "raw", args.count, args.smoke, args.jobs)
    print(f"data ready in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    rows = measure(args, work / "raw", work)
    cpu = platform.processor() or platform.machine()
    print(
        f"\nprep bench: {args.count} images, {args.jobs} jobs, {os.cpu_count()} cores ({cpu}), "
        f"python {platform.python_version()}, {time.perf_counter() - start:.0f} s total\n"
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
