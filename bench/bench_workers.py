"""Rows 40g-40h: DataLoader workers on detection samples (issue 40). The demo's photos as 256 px
JPEG q90 with 0-50 boxes, their labels and a caption (bench_samples' recipe), batch 256: an
epoch with 2 workers against the same loader with 0 workers, reused (persistent workers, the
second pass on) and fresh (a new loader each epoch, its workers started). Best of interleaved
repeats. Row 40g' (info): batch 64, reused, where each worker makes more batches an epoch than
its ring holds.

    python bench/bench_workers.py --profile     # after bench.py --only workers made the data

prints where an epoch's time goes (start, first batch, the other batches; the main process's
and the workers' CPU time and page faults), 0 against 2 workers, fresh and reused: medians of
interleaved repeats (a running worker's CPU time from /proc, to 10 ms).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from rows import HERE, Row, info, versus

BATCH = 256
SMALL = 64  # row 40g': 32 batches an epoch, 16 a worker (its ring: 4 a field)


def _rate(loader: Any) -> float:
    n, start = 0, time.perf_counter()
    for batch in loader:
        n += len(batch["image"])
    return n / (time.perf_counter() - start)


def dataset(args: argparse.Namespace, work: Path) -> Any:
    from bench_samples import detection  # bench/bench_samples.py: the row 25c samples

    import prep as prep_api
    from loaders import SampleDataset
    from prep.fields import Array, Image, Text

    out = work / "w-detection"
    if not (out / "manifest.json").is_file():
        paths = [str(p) for p in sorted((work / "raw" / "images").rglob("*.jpg"))]
        fields = {
            "image": Image(sizes=(256,), codec="jpeg"),
            "boxes": Array("float32", (None, 4)),
            "labels": Array("int64", (None,)),
            "caption": Text(),
        }
        prep_api.pack_samples(
            lambda x: detection(*x),
            list(enumerate(paths)),
            out,
            fields,
            jobs=args.jobs,
            overwrite=True,
            show_progress=False,
        )
    return SampleDataset(out, ragged="list")


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from loaders import make_loader

    ds = dataset(args, work)
    reused = {w: make_loader(ds, BATCH, shuffle=True, num_workers=w) for w in (0, 2)}
    for loader in reused.values():
        _rate(loader)  # workers started, files in the page cache
    best: dict[str, float] = {}
    for _ in range(max(2, args.reps)):
        for w, loader in reused.items():
            fresh = _rate(make_loader(ds, BATCH, shuffle=True, num_workers=w))
            best[f"fresh {w}"] = max(best.get(f"fresh {w}", 0.0), fresh)
            best[f"reused {w}"] = max(best.get(f"reused {w}", 0.0), _rate(loader))
    small = {w: make_loader(ds, SMALL, shuffle=True, num_workers=w) for w in (0, 2)}
    for loader in small.values():
        _rate(loader)
    for _ in range(max(2, args.reps)):
        for w, loader in small.items():
            best[f"small {w}"] = max(best.get(f"small {w}", 0.0), _rate(loader))
    note = "info (more batches a worker than its ring holds)"
    return [
        *(
            versus(
                f"{row} detection, 2 workers vs 0, {kind}",
                best[f"{kind} 2"],
                best[f"{kind} 0"],
                "img/s",
                ">= 1.0x",
            )
            for row, kind in (("40g", "reused"), ("40h", "fresh"))
        ),
        info(
            f"40g' detection, batch {SMALL}, 2 workers vs 0, reused",
            best["small 2"],
            best["small 0"],
            "img/s",
            note,
        ),
    ]


PHASES = ("make_loader", "start (iter)", "first batch", "other batches", "epoch")
COSTS = ("main CPU", "workers CPU", "main faults", "worker faults")


def _usage(pids: list[int]) -> tuple[float, float, int, int]:
    """CPU seconds and minor faults of this process, then of its waited-for children and of
    the running processes `pids` (from /proc: CPU time in clock ticks)."""
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    cpu, faults = kids.ru_utime + kids.ru_stime, kids.ru_minflt
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        faults += int(stat[7])
    return own.ru_utime + own.ru_stime, cpu, own.ru_minflt, faults


def _phases(make: Any, loader: Any) -> dict[str, float]:
    """One epoch's phases in ms (a new loader from `make` where `loader` is None), its CPU ms
    and page faults: a new loader's workers' once they are joined, running ones' from /proc."""
    fresh = loader is None
    running = getattr(getattr(loader, "_iterator", None), "_workers", [])
    pids = [w.pid for w in running]
    before, clock = _usage(pids), [time.perf_counter()]
    loader = make() if fresh else loader
    clock.append(time.perf_counter())
    batches = iter(loader)
    clock.append(time.perf_counter())
    next(batches)
    clock.append(time.perf_counter())
    for _ in batches:
        pass
    clock.append(time.perf_counter())
    got = {p: 1e3 * (b - a) for p, a, b in zip(PHASES, clock, clock[1:], strict=False)}
    got["epoch"] = 1e3 * (clock[-1] - clock[0])
    after = _usage(pids)  # this process's: the epoch's, not the shutdown of its workers
    if fresh:
        del batches, loader
        gc.collect()  # the workers joined: their usage counted
        joined = _usage(pids)
        after = (after[0], joined[1], after[2], joined[3])
    for k, (a, b) in enumerate(zip(before, after, strict=True)):
        got[COSTS[k]] = (b - a) * (1e3 if k < 2 else 1)
    return got


def profile(args: argparse.Namespace, work: Path) -> str:
    """A table of the medians of `_phases`, interleaved over --reps rounds."""
    from loaders import make_loader

    ds = dataset(args, work)

    def make(w: int) -> Any:
        return lambda: make_loader(ds, BATCH, shuffle=True, num_workers=w)

    reused = {w: make(w)() for w in (0, 2)}
    for loader in reused.values():
        _rate(loader)
    runs = {k: [] for k in ("0 fresh", "2 fresh", "0 reused", "2 reused")}
    for _ in range(args.reps):
        for w in (0, 2):
            runs[f"{w} fresh"].append(_phases(make(w), None))
            runs[f"{w} reused"].append(_phases(None, reused[w]))
    cols = list(runs)
    lines = [f"| ms, median of {args.reps} | " + " | ".join(f"{c} workers" for c in cols) + " |"]
    lines.append("|---" * (len(cols) + 1) + "|")
    for phase in (*PHASES, *COSTS):
        cells = [
            f"{statistics.median(r[phase] for r in runs[c]):,.0f}" if phase in runs[c][0] else "-"
            for c in cols
        ]
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    n = len(ds)
    return f"{n} samples, batch {BATCH}, {os.cpu_count()} cores\n\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--profile", action="store_true", help="where an epoch's time goes")
    ap.add_argument("--count", type=int, default=2000, help="as bench.py's (its data: nCOUNT)")
    ap.add_argument("--reps", type=int, default=7, help="interleaved repeats; medians")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    work = HERE / "out" / f"n{args.count}"
    if args.profile:
        print(profile(args, work))
    else:
        for r in rows(args, work):
            print(f"{r.name}: {r.ours:,.0f} vs {r.ref:,.0f} {r.unit}, {r.ratio:.2f}x")


if __name__ == "__main__":
    main()
