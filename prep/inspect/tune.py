"""prep tune: time the real loader at several worker counts and recommend one ("Efficient
PyTorch", advice 4).

Each setting runs `loaders.make_loader` over `loaders.ImageShardDataset` (shuffled, as in
training) for `seconds` after its first batch, so worker start-up is left out: persistent
workers pay it once per training run. torch is imported here, never by `prep --help`.

The RAM column is the article's arithmetic: batches in flight x bytes per batch, where a
DataLoader with W > 0 workers keeps W x prefetch_factor batches in flight and W = 0 builds one
batch at a time in the main process. Bytes per batch count the tensors the loader returns, in
each field's `out_dtype` (loaders.fields): uint8 images and masks, int64 labels.

`--plot` draws with matplotlib, the optional `[plot]` extra: `check_plot` fails before the timed
run where it is missing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from loaders.fields import FIELDS
from loaders.format import Manifest
from prep import PrepError
from prep.inspect.report import mb

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

    @property
    def candidates(self) -> list[TuneRow]:
        """Settings with workers when any was tried: with 0 workers the main process loads
        every batch in the training step's own time, while workers overlap it with the step."""
        return [r for r in self.rows if r.workers > 0] or self.rows

    @property
    def best(self) -> TuneRow:
        return max(self.candidates, key=lambda r: r.samples_per_s)

    @property
    def recommended(self) -> TuneRow:
        """The fewest workers within 10% of the best rate: each worker costs a core and
        prefetch_factor batches of RAM, for little gain past that point."""
        floor = GOOD_ENOUGH * self.best.samples_per_s
        return min(
            (r for r in self.candidates if r.samples_per_s >= floor), key=lambda r: r.workers
        )

    def table(self) -> str:
        lines = [
            f"{self.root}: {self.samples} samples at {self.size} px, fields "
            f"{', '.join(self.fields)}, batch {self.batch_size} = {mb(self.batch_bytes)}, "
            f"prefetch_factor {self.prefetch_factor}",
            f"{'workers':>7}{'samples/s':>12}{'cpu':>8}{'batches':>9}{'RAM in flight':>15}",
        ]
        for r in self.rows:
            mark = "  <- recommended" if r is self.recommended else ""
            lines.append(
                f"{r.workers:>7}{r.samples_per_s:>12,.0f}{r.cpu_percent:>7.0f}%"
                f"{r.batches_in_flight:>9}"
                f"{mb(r.ram_bytes):>15}{mark}"
            )
        return "\n".join(lines)

    def advice(self) -> str:
        r, tried = self.recommended, max(x.workers for x in self.rows)
        lines = [
            f"recommended: num_workers={r.workers}, batch_size={self.batch_size}, "
            f"prefetch_factor={self.prefetch_factor}: {r.samples_per_s:,.0f} samples/s "
            f"({r.samples_per_s / self.batch_size:,.1f} batches/s), "
            f"{r.batches_in_flight} x {mb(self.batch_bytes)} = {mb(r.ram_bytes)} in flight",
            f"  loader = make_loader(ds, batch_size={self.batch_size}, shuffle=True, "
            f"num_workers={r.workers})",
        ]
        # Every fewer count fell over 10% short: more workers may still pay off.
        if r.workers == tried and len(self.candidates) > 1:
            lines.append(
                "  throughput still grows at the most workers tried: the loader is CPU-bound "
                "here; try more workers (--workers) on a machine with more cores"
            )
        zero = next((x for x in self.rows if x.workers == 0), None)
        if zero is not None and r.workers > 0:
            ms = 1000 * self.batch_size / zero.samples_per_s
            lines.append(
                f"  num_workers=0 reads {zero.samples_per_s:,.0f} samples/s, but adds {ms:.1f} "
                "ms to every training step; workers load the next batches during the step"
            )
        return "\n".join(lines)


def worker_counts(cores: int) -> list[int]:
    """0, 1, 2, 3, 4, then 6, 8, 12, 16, 24, ... (2^k and 1.5 x 2^k) below `cores`, and `cores`:
    every count on a small machine, a dozen settings on a big one.

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
    """Bytes of one batch as the loader returns it (see the module docstring)."""
    per_sample = 0
    for f in fields:
        spec = m.arrays[m.array_for(f, size)]
        itemsize = np.dtype(FIELDS[f].out_dtype).itemsize  # labels widen to int64
        per_sample += int(np.prod(spec.shape, dtype=np.int64)) * itemsize
    return per_sample * batch_size


def in_flight(workers: int, prefetch_factor: int) -> int:
    return workers * prefetch_factor if workers > 0 else 1


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its live children, the DataLoader
    workers: psutil reads them while they run, where os.times counts only waited-for children."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:  # exited meanwhile
            continue
        total += t.user + t.system
    return total


def _forever(loader: Any) -> Generator[Any, None, None]:
    while True:
        yield from loader  # a new epoch each time; persistent workers stay up


def measure(
    dataset: Any, batch_size: int, workers: int, prefetch: int, seconds: float, nbytes: int
) -> TuneRow:
    """One setting: samples/s and CPU use over `seconds` after the first batch; `nbytes` is
    the size of one batch, for the RAM column."""
    from torch.utils.data import RandomSampler

    from loaders import make_loader

    extra: dict[str, Any] = {"prefetch_factor": prefetch} if workers > 0 else {}
    # Shuffled as in training, in one long epoch of many permutations: a small dataset would
    # otherwise time the epoch restarts (a pause of every worker), which a real epoch of
    # thousands of batches does not notice.
    epoch = max(len(dataset), batch_size) * 1000
    extra["sampler"] = RandomSampler(dataset, num_samples=epoch)
    loader = make_loader(dataset, batch_size, num_workers=workers, **extra)
    batches = _forever(loader)
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
    batches_in_flight = in_flight(workers, prefetch)
    return TuneRow(workers, samples / elapsed, cpu, batches_in_flight, batches_in_flight * nbytes)


def tune(
    root: Path,
    size: int | None = None,
    batch_size: int = 64,
    seconds: float = 3.0,
    workers: Sequence[int] | None = None,
    prefetch_factor: int = PREFETCH,
    limit: int | None = None,
    show_progress: bool = True,
) -> TuneResult:
    """Time the loader at each worker count (default: worker_counts(cpu cores))."""
    from torch.utils.data import Subset

    from loaders import ImageShardDataset
    from prep.inspect.preview import image_dataset
    from prep.run.parallel import progress

    m, size = image_dataset(root, size, "tune times")
    if batch_size < 1 or prefetch_factor < 1 or seconds <= 0:
        raise PrepError("--batch-size, --prefetch-factor and --seconds must be positive")
    if limit is not None and limit < 1:
        raise PrepError("--limit must be at least 1")
    counts = sorted(set(workers)) if workers else worker_counts(os.cpu_count() or 1)
    if counts[0] < 0:
        raise PrepError(f"worker counts {counts} must be 0 or more")
    fields = tuple(f for f in TRAIN_FIELDS if f in m.fields())
    ds: Any = ImageShardDataset(root, size=size, fields=fields)
    if limit is not None:
        ds = Subset(ds, range(min(limit, len(ds))))
    if len(ds) == 0:
        raise PrepError(f"{root} holds no samples to load")
    nbytes = batch_bytes(m, size, fields, batch_size)
    result = TuneResult(root, size, batch_size, prefetch_factor, fields, len(ds), nbytes)
    bar = progress(len(counts), "setting", f"tune {root.name}") if show_progress else None
    try:
        for w in counts:
            result.rows.append(measure(ds, batch_size, w, prefetch_factor, seconds, nbytes))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return result


def check_plot() -> None:
    """Fail before a timed run whose plot cannot be drawn: matplotlib is the [plot] extra."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PrepError(
            "--plot needs matplotlib, which is not installed. HINT: pip install 'prep[plot]'"
        ) from None


def plot(result: TuneResult, path: Path, width: int = 640, height: int = 400) -> None:
    """Samples/s against workers, `width` x `height` px: one point per setting, labelled with its
    CPU use, the recommended one in orange. Drawn by Agg (a file, no display)."""
    check_plot()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from prep.inspect.preview import save_image

    dpi = 100
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    rows, rec = sorted(result.rows, key=lambda r: r.workers), result.recommended
    ax.plot([r.workers for r in rows], [r.samples_per_s for r in rows], "o-", color="tab:blue")
    ax.plot(rec.workers, rec.samples_per_s, "o", color="tab:orange", markersize=10)
    point: dict[str, Any] = {"textcoords": "offset points", "fontsize": "small"}
    ax.annotate(
        "recommended", (rec.workers, rec.samples_per_s), (8, -14), **point, color="tab:orange"
    )
    for r in rows:
        xy = (r.workers, r.samples_per_s)
        ax.annotate(f"cpu {r.cpu_percent:.0f}%", xy, (8, 4), **point, color="0.35")
    ax.set_xticks([r.workers for r in rows])
    ax.margins(x=0.12)  # room for the last point's label
    ax.set_ylim(0, 1.15 * max(r.samples_per_s for r in rows))
    ax.yaxis.set_major_formatter("{x:,.0f}")
    ax.grid(axis="y", color="0.9")
    ax.set(xlabel="workers", ylabel="samples/s")
    ax.set_title(
        f"{result.root.name}: loader throughput, {result.size} px, batch {result.batch_size}",
        fontsize="medium",
    )
    if any(r.workers == 0 for r in rows):
        fig.supxlabel(
            "0 workers: the training loop loads each batch itself, in its own time",
            fontsize="small",
            color="0.45",
        )
    save_image(fig.savefig, path)
