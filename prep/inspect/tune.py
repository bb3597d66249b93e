"""prep tune: time the real loader (`make_loader` over `ImageShardDataset`, shuffled) with threads
and with worker processes, each for `seconds` after its first batch, and recommend a setting;
`--plot` draws them (the `[plot]` extra). torch is imported here, not by `prep --help`."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from loaders.fields import Image, declared
from loaders.format import Manifest, read_manifest
from prep.inspect.preview import save_image
from prep.inspect.report import mb
from prep.run.errors import PrepError
from prep.run.parallel import progress

PREFETCH = 2  # make_loader's default prefetch_factor
GOOD_ENOUGH = 0.9  # recommend the fewest workers within 10% of the best throughput
TRAIN_FIELDS = ("image", "label", "mask")  # what a training loop reads; orig_size is for eval


@dataclass
class TuneRow:
    workers: int
    samples_per_s: float
    cpu_percent: float  # of one core, as top shows it: the main process and its workers
    batches_in_flight: int
    ram_bytes: int
    threads: int = 0  # reading threads of the main process (with workers == 0)

    @property
    def overlaps(self) -> bool:
        """Whether the batches are read while the training step runs."""
        return self.workers > 0 or self.threads > 0

    @property
    def setting(self) -> str:
        n, what = (self.workers, "worker") if self.workers else (self.threads, "thread")
        return f"{n} {what}{'s' if n > 1 else ''}" if n else "in the step"


@dataclass
class TuneResult:
    root: Path
    size: int
    batch_size: int
    prefetch_factor: int
    fields: tuple[str, ...]
    samples: int
    batch_bytes: int
    rows: list[TuneRow] = field(default_factory=list)
    keep: bool = False  # --mode keep: timed with crop=CenterCrop(size, ratio=1.0)

    @property
    def candidates(self) -> list[TuneRow]:
        """Settings that overlap the step (threads or workers), when any was tried."""
        return [r for r in self.rows if r.overlaps] or self.rows

    @property
    def best(self) -> TuneRow:
        return max(self.candidates, key=lambda r: r.samples_per_s)

    @property
    def recommended(self) -> TuneRow:
        """The cheapest setting within 10% of the best: threads, then the fewest workers."""
        floor = GOOD_ENOUGH * self.best.samples_per_s
        return min(
            (r for r in self.candidates if r.samples_per_s >= floor),
            key=lambda r: (r.workers, r.threads),
        )

    def table(self) -> str:
        lines = [
            f"{self.root}: {self.samples} samples at {self.size} px, fields "
            f"{', '.join(self.fields)}, batch {self.batch_size} = {mb(self.batch_bytes)}, "
            f"prefetch_factor {self.prefetch_factor}",
            f"{'setting':>11}{'samples/s':>12}{'cpu':>8}{'batches':>9}{'RAM in flight':>15}",
        ]
        lines += [
            f"{r.setting:>11}{r.samples_per_s:>12,.0f}{r.cpu_percent:>7.0f}%"
            f"{r.batches_in_flight:>9}{mb(r.ram_bytes):>15}"
            + ("  <- recommended" if r is self.recommended else "")
            for r in self.rows
        ]
        return "\n".join(lines)

    def advice(self) -> str:
        r, tried = self.recommended, max(x.workers for x in self.rows)
        how = f"prefetch_factor={self.prefetch_factor}" if r.workers else f"threads={r.threads}"
        lines = [
            f"recommended: num_workers={r.workers}, {how}, batch_size={self.batch_size}: "
            f"{r.samples_per_s:,.0f} samples/s "
            f"({r.samples_per_s / self.batch_size:,.1f} batches/s), "
            f"{r.batches_in_flight} x {mb(self.batch_bytes)} = {mb(r.ram_bytes)} in flight",
            f"  loader = make_loader(ds, batch_size={self.batch_size}, shuffle=True, "
            + (f"num_workers={r.workers})" if r.workers else f"threads={r.threads})"),
        ]
        if self.keep:  # mode keep: samples differ in shape, a batch needs the crop timed here
            crop = f"crop=CenterCrop({self.size}, ratio=1.0)"
            lines.insert(
                1, f"  ds = ImageShardDataset({str(self.root)!r}, size={self.size}, {crop})"
            )
        # Every fewer count fell over 10% short: more workers may still pay off.
        if r.workers and r.workers == tried and len(self.candidates) > 1:
            lines.append(
                "  throughput still grows at the most workers tried: the loader is CPU-bound "
                "here; try more workers (--workers) on a machine with more cores"
            )
        zero = next((x for x in self.rows if not x.overlaps), None)
        if zero is not None and r.overlaps:
            ms = 1000 * self.batch_size / zero.samples_per_s
            lines.append(
                f"  without threads or workers: {zero.samples_per_s:,.0f} samples/s, but it "
                f"adds {ms:.1f} ms to every training step; threads and workers load the next "
                "batches during the step"
            )
        return "\n".join(lines)


def worker_counts(cores: int) -> list[int]:
    """0..4, then 2^k and 1.5 x 2^k below `cores`, and `cores`: a dozen settings at most.

    >>> worker_counts(2), worker_counts(20)
    ([0, 1, 2], [0, 1, 2, 3, 4, 6, 8, 12, 16, 20])
    """
    counts = [n for n in range(5) if n <= cores]
    n = 4
    while n < cores:
        n = n * 3 // 2 if n & (n - 1) == 0 else n * 4 // 3  # 4 -> 6 -> 8 -> 12 -> 16 ...
        counts.append(min(n, cores))
    return counts


def batch_bytes(m: Manifest, size: int, fields: Sequence[str], batch_size: int) -> int:
    """Bytes of one batch as the loader returns it (read_dtype: labels widen to int64)."""
    kinds, specs = declared(m), {f: m.arrays[m.array_for(f, size)] for f in fields}
    return batch_size * sum(
        int(np.prod(s.shape, dtype=np.int64)) * np.dtype(kinds[f].read_dtype(s)).itemsize
        for f, s in specs.items()
    )


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, 8 up to the cores (a copy per batch saturates memory bandwidth before 8).

    >>> thread_counts(1), thread_counts(2), thread_counts(64)
    ([1], [1, 2], [1, 2, 4, 8])
    """
    return [t for t in (1, 2, 4, 8) if t <= max(1, cores)]


def cpu_seconds() -> float:
    """CPU seconds of this process and its live workers (os.times: only waited-for children)."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):  # exited meanwhile
            total += sum(p.cpu_times()[:2])  # user + system
    return total


def measure(
    dataset: Any,
    batch_size: int,
    workers: int,
    prefetch: int,
    seconds: float,
    nbytes: int,
    threads: int = 0,
) -> TuneRow:
    """One setting's samples/s, CPU use and RAM in flight over `seconds` after its first batch."""
    from torch.utils.data import RandomSampler

    from loaders import make_loader

    extra: dict[str, Any] = {"prefetch_factor": prefetch} if workers > 0 else {}
    # Shuffled as in training, in one long epoch of many permutations: a small dataset would
    # otherwise time the epoch restarts (a pause of every worker), which a real epoch of
    # thousands of batches does not notice.
    epoch = max(len(dataset), batch_size) * 1000
    extra["sampler"] = RandomSampler(dataset, num_samples=epoch)
    loader = make_loader(dataset, batch_size, num_workers=workers, threads=threads, **extra)
    batches = (b for _ in itertools.count() for b in loader)  # persistent workers stay up
    try:
        next(batches)  # workers started, first batch out
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        samples, elapsed = 0, 0.0
        while elapsed < seconds:
            samples += len(next(batches)[0])
            elapsed = time.perf_counter() - t0
        cpu1 = cpu_seconds()
    finally:
        batches.close()
        del loader  # shuts persistent workers down
    cpu = 100.0 * (cpu1 - cpu0) / elapsed
    n = workers * prefetch if workers > 0 else threads + 1  # batches in flight
    return TuneRow(workers, samples / elapsed, cpu, n, n * nbytes, threads)


def tune(
    root: Path,
    size: int | None = None,
    batch_size: int = 64,
    seconds: float = 3.0,
    workers: Sequence[int] | None = None,
    prefetch_factor: int = PREFETCH,
    limit: int | None = None,
    show_progress: bool = True,
    threads: Sequence[int] | None = None,
) -> TuneResult:
    """Time the loader at each thread count, then at each worker count (0: neither)."""
    m = read_manifest(root)  # checked before torch loads (seconds)
    if not isinstance(declared(m).get("image"), Image):
        raise PrepError(
            f"{root} has no image field 'image': prep tune times ImageShardDataset. "
            "HINT: pass a dataset of prep pack"
        )
    sizes = m.sizes()
    size = min(sizes) if size is None else size
    if size not in sizes:
        raise PrepError(f"{root} has no size {size}. HINT: --size one of {sizes}")
    if batch_size < 1 or prefetch_factor < 1 or seconds <= 0:
        raise PrepError("--batch-size, --prefetch-factor and --seconds must be positive")
    if limit is not None and limit < 1:
        raise PrepError("--limit must be at least 1")
    from torch.utils.data import Subset

    from loaders import CenterCrop, ImageShardDataset

    cores = os.cpu_count() or 1
    counts = sorted(set(workers)) if workers else worker_counts(cores)
    tcounts = sorted(set(threads)) if threads is not None else thread_counts(cores)
    if counts[0] < 0 or (tcounts and tcounts[0] < 0):
        raise PrepError(f"worker counts {counts} and thread counts {tcounts} must be 0 or more")
    settings = [(0, t) for t in tcounts if t > 0] + [(w, 0) for w in counts]
    fields = tuple(f for f in TRAIN_FIELDS if f in m.fields)
    keep = declared(m)["image"].mode == "keep"  # type: ignore[attr-defined]  # one shape a batch
    crop = CenterCrop(size, ratio=1.0) if keep else None
    ds: Any = ImageShardDataset(root, size=size, fields=fields, crop=crop)
    if limit is not None:
        ds = Subset(ds, range(min(limit, len(ds))))
    if len(ds) == 0:
        raise PrepError(f"{root} holds no samples to load")
    nbytes = batch_bytes(m, size, fields, batch_size)
    result = TuneResult(root, size, batch_size, prefetch_factor, fields, len(ds), nbytes, keep=keep)
    bar = progress(len(settings), "setting", f"tune {root.name}", show_progress)
    try:
        for w, t in settings:
            result.rows.append(measure(ds, batch_size, w, prefetch_factor, seconds, nbytes, t))
            bar.update(1)
    finally:
        bar.close()
    return result


def check_plot(who: str = "--plot needs", extra: str = "plot") -> None:
    """Fail before a run whose charts cannot be drawn (matplotlib: the [plot], [report] extras)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PrepError(
            f"{who} matplotlib, which is not installed. HINT: pip install 'prep[{extra}]'"
        ) from None


def plot(result: TuneResult, path: Path) -> None:
    """Samples/s of each setting labelled with its CPU use, the recommended one in orange."""
    check_plot()
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # The title holds the folder's name: text, never a formula ("$x^{$" would not parse)
    with matplotlib.rc_context({"text.parse_math": False}):
        fig = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")  # 640 x 400 px
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        rows, rec = sorted(result.rows, key=lambda r: (r.workers, r.threads)), result.recommended
        x = list(range(len(rows)))
        ax.plot(x, [r.samples_per_s for r in rows], "o-", color="tab:blue")
        at = (rows.index(rec), rec.samples_per_s)
        ax.plot(*at, "o", color="tab:orange", markersize=10)
        point: dict[str, Any] = {"textcoords": "offset points", "fontsize": "small"}
        ax.annotate("recommended", at, (8, -14), **point, color="tab:orange")
        for i, r in zip(x, rows, strict=True):
            xy = (i, r.samples_per_s)
            ax.annotate(f"cpu {r.cpu_percent:.0f}%", xy, (8, 4), **point, color="0.35")
        ax.set_xticks(x, [r.setting for r in rows])
        ax.margins(x=0.12)  # room for the last point's label
        ax.set_ylim(0, 1.15 * max(r.samples_per_s for r in rows))
        ax.yaxis.set_major_formatter("{x:,.0f}")
        ax.grid(axis="y", color="0.9")
        ax.set(xlabel="threads (num_workers=0) or worker processes", ylabel="samples/s")
        ax.set_title(
            f"{result.root.name}: loader throughput, {result.size} px, batch {result.batch_size}",
            fontsize="medium",
        )
        if any(not r.overlaps for r in rows):
            fig.supxlabel(
                "in the step: the training loop loads each batch itself, in its own time",
                fontsize="small",
                color="0.45",
            )
        save_image(fig, path)
