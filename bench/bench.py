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
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from rows import HERE, PREP, Row, info, prep, run, timed, versus


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
        versus("5a tokenize bpe vs encode_batch", rate, ref, "tok/s", ">= 1.0x"),
        info("5b tokenize bytes (MB/s of text)", mb_ours, mb_ref, "MB/s", note),
    ]


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
GROUPS["jpeg"] = "bench_jpeg"  # bench/bench_jpeg.py: JPEG shards (issue 13)
GROUPS["samples"] = "bench_samples"  # bench/bench_samples.py: samples of any shape (issue 25)
GROUPS["import"] = "bench_import"  # bench/bench_import.py: imported HF and WebDataset (26)
GROUPS["dupes"] = "bench_dupes"  # bench/bench_dupes.py: hashes at pack time, near pairs (28)
GROUPS["video"] = "bench_video"  # bench/bench_video.py: video clips and packing (27)
GROUPS["media"] = "bench_media"  # bench/bench_media.py: audio windows and packing (27)
GROUPS["report"] = "bench_report"  # bench/bench_report.py: prep report against pack (28)
GROUPS["boxes"] = "bench_boxes"  # bench/bench_boxes.py: box-aware transforms (26)
GROUPS["startup"] = "bench_startup"  # bench/bench_startup.py: --help and a one-image pack (30)
GROUPS["index"] = "bench_index"  # bench/bench_index.py: a million shards opened (35)
GROUPS["gpu"] = "bench_gpu"  # bench/bench_gpu.py: the whole-batch ops CUDA runs (41)
GROUPS["packing"] = "bench_packing"  # bench/bench_packing.py: packed sequences (38)
GROUPS["zstd"] = "bench_zstd"  # bench/bench_zstd.py: --compress zstd, size and reads (40)
GROUPS["workers"] = "bench_workers"  # bench/bench_workers.py: detection with workers (40)
GROUPS["resume"] = "bench_resume"  # bench/bench_resume.py: a loader's state (36)
GROUPS["grow"] = "bench_grow"  # bench/bench_grow.py: --append vs a repack, merge of 2 GiB (37)
GROUPS["quality"] = "bench_quality"  # bench/bench_quality.py: quality scores, labels (39)


def measure(args: argparse.Namespace, raw: Path, work: Path) -> list[Row]:
    """The rows `--only` asks for. Pack makes the datasets that load and memory read."""
    import bench_load  # bench/bench_load.py
    import bench_pack  # bench/bench_pack.py

    rows: list[Row] = []
    only = args.only.split(",")
    if "memory" in only:
        rows.append(bench_pack.bench_pack_memory(raw, work, args.sample))
    if "pack" in only or "load" in only or "memory" in only:
        rows += bench_pack.bench_pack(raw, work, args.jobs, args.sample, args.count, args.reps)
    if "load" in only:
        rows += bench_load.bench_load(raw, work, args.sample)
    if "tokenize" in only:
        rows += bench_tokenize(raw, work, args.jobs, 200 if args.smoke else 8000, args.reps)
    if "memory" in only:
        rows.append(bench_load.bench_loader_memory(work))
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
