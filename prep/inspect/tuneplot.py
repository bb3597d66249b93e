"""prep tune --plot: samples/s for each setting tried, drawn with matplotlib, the optional
`[plot]` extra: `check_plot` fails before the timed run where it is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prep.inspect.tuned import TuneResult
from prep.run.errors import PrepError


def check_plot() -> None:
    """Fail before a timed run whose plot cannot be drawn: matplotlib is the [plot] extra."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PrepError(
            "--plot needs matplotlib, which is not installed. HINT: pip install 'prep[plot]'"
        ) from None


def plot(result: TuneResult, path: Path, width: int = 640, height: int = 400) -> None:
    """Samples/s for each setting (in the step, then threads, then workers), `width` x `height`
    px: one point per setting, labelled with its CPU use, the recommended one in orange. Drawn
    by Agg (a file, no display)."""
    check_plot()
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from prep.inspect.sheet import save_image

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
