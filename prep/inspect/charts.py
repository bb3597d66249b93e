"""prep report's charts: matplotlib figures as inline SVG, never through pyplot (no window, no
global figure state), text kept as text and no date, so that the same data gives the same bytes.

>>> "<svg" in histograms([("width", np.array([1.0, 2.0, 2.0]))], bins=2)
True
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
RC: Any = {  # matplotlib rc settings, as Any: its stubs list every key as a Literal
    "svg.fonttype": "none",  # text as <text>: a tenth of the bytes of glyph paths
    "svg.hashsalt": "prep",  # clip-path ids from the content, not a random salt
    "text.parse_math": False,  # class names and reasons are text: "$x^{$" is no formula
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
MAX_BARS = 40  # classes past this many: the largest shown, the rest counted in the title


@contextmanager
def _figure(width: float, height: float, title: str = "") -> Iterator[Any]:
    """A figure of `width` x `height` inches, made and saved (svg) under RC."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height), layout="constrained")
        if title:
            fig.suptitle(title)
        yield fig


def svg(fig: Any) -> str:
    """The figure as an `<svg>` element for inline use (no XML header, DOCTYPE or metadata)."""
    buf = io.StringIO()
    with warnings.catch_warnings():
        # Text stays text (svg.fonttype none): the browser draws a glyph that matplotlib's
        # font lacks (a CJK token), so matplotlib's warning about it is moot.
        warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)  # RDF: bytes
    return text[text.index("<svg") :]


def bars(counts: Mapping[str, Mapping[str, int]], title: str) -> str:
    """Grouped bars: a group a class (every series' keys, in first-seen order), a bar a series
    (a split), its count written above it."""
    classes = list(dict.fromkeys(c for s in counts.values() for c in s))
    shown = classes
    if len(classes) > MAX_BARS:
        total = {c: sum(s.get(c, 0) for s in counts.values()) for c in classes}
        shown = sorted(classes, key=lambda c: -total[c])[:MAX_BARS]
        title += f" (the {MAX_BARS} largest of {len(classes)} classes)"
    with _figure(min(12.0, 2.0 + 0.45 * len(shown) * max(1, len(counts))), 3.0) as fig:
        ax = fig.add_subplot()
        width = 0.8 / max(1, len(counts))
        x = np.arange(len(shown))
        for j, (name, series) in enumerate(counts.items()):
            values = [series.get(c, 0) for c in shown]
            got = ax.bar(x + j * width, values, width, label=name, color=COLOURS[j % 6])
            if len(shown) * len(counts) <= 24:
                ax.bar_label(got, fontsize=7)
        ax.set_xticks(x + width * (len(counts) - 1) / 2, shown, rotation=45 if shown else 0)
        ax.set_title(title)
        ax.set_ylabel("samples")
        if len(counts) > 1:
            ax.legend()
        return svg(fig)


def histograms(
    panels: Sequence[tuple[str, np.ndarray]], bins: int = 30, log: bool = False, title: str = ""
) -> str:
    """Histograms side by side, one a (label, values) panel; NaN values left out (their count
    in the label); `log`: a log count axis (long tails)."""
    with _figure(3.2 * len(panels), 2.6, title) as fig:
        for k, (label, values) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), k + 1)
            v = np.asarray(values, dtype=np.float64)
            nan = int(np.isnan(v).sum())
            v = v[~np.isnan(v)]
            ax.hist(v, bins=bins if len(v) else 1, color=COLOURS[k % 6], log=log)
            ax.set_xlabel(label + (f" ({nan} missing)" if nan else ""))
        return svg(fig)


def categories(panels: Sequence[tuple[str, Sequence[str], Sequence[int]]], title: str = "") -> str:
    """Horizontal bars side by side, one a (label, names, counts) panel, largest on top."""
    tallest = max((len(names) for _, names, _ in panels), default=1)
    with _figure(3.4 * len(panels), 1.0 + 0.22 * min(tallest, MAX_BARS), title) as fig:
        for k, (label, names, counts) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), k + 1)
            order = np.argsort(counts, kind="stable")[::-1][:MAX_BARS][::-1]
            ax.barh(
                [str(names[i]) for i in order], [counts[i] for i in order], color=COLOURS[k % 6]
            )
            ax.set_xlabel(label)
        return svg(fig)


def channels(mean: Sequence[float], std: Sequence[float], title: str) -> str:
    """Each channel's mean as a bar with its std as an error bar, in pixel units (0-255)."""
    names = ["gray"] if len(mean) == 1 else ["R", "G", "B", "A"][: len(mean)]
    colours = ["#888888"] if len(mean) == 1 else ["#d62728", "#2ca02c", "#1f77b4", "#999999"]
    with _figure(3.0, 2.6) as fig:
        ax = fig.add_subplot()
        ax.bar(names, mean, yerr=std, capsize=6, color=colours[: len(mean)])
        ax.set_ylim(0, 255)
        ax.set_title(title)
        return svg(fig)
