"""What `prep tune` found: a row per setting timed; the result's table, advice, recommended
setting and plot (`--plot`: matplotlib, the optional `[plot]` extra)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prep.inspect.preview import save_image
from prep.inspect.report import mb
from prep.run.errors import PrepError

GOOD_ENOUGH = 0.9  # recommend the fewest workers within 10% of the best throughput


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
        if self.workers:
            return f"{self.workers} worker{'s' if self.workers > 1 else ''}"
        if self.threads:
            return f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        return "in the step"


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
        """Settings that overlap the step (threads or workers) when any was tried: without
        either the main process loads every batch in the training step's own time."""
        return [r for r in self.rows if r.overlaps] or self.rows

    @property
    def best(self) -> TuneRow:
        return max(self.candidates, key=lambda r: r.samples_per_s)

    @property
    def recommended(self) -> TuneRow:
        """The cheapest setting within 10% of the best rate: threads before workers (each
        worker costs a process, a core and prefetch_factor batches of RAM), then the fewest."""
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
        for r in self.rows:
            mark = "  <- recommended" if r is self.recommended else ""
            lines.append(
                f"{r.setting:>11}{r.samples_per_s:>12,.0f}{r.cpu_percent:>7.0f}%"
                f"{r.batches_in_flight:>9}{mb(r.ram_bytes):>15}{mark}"
            )
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


def check_plot() -> None:
    """Fail before a timed run whose plot cannot be drawn: matplotlib is the [plot] extra."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PrepError(
            "--plot needs matplotlib, which is not installed. HINT: pip install 'prep[plot]'"
        ) from None


def plot(result: TuneResult, path: Path, width: int = 640, height: int = 400) -> None:
    """Samples/s of each setting (in the step, threads, workers) labelled with its CPU use, the
    recommended one in orange, `width` x `height` px, drawn by Agg (a file, no display)."""
    check_plot()
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # The title holds the folder's name: text, never a formula ("$x^{$" would not parse)
    with matplotlib.rc_context({"text.parse_math": False}):
        dpi = 100
        fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")
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
