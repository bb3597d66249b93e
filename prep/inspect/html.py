"""The pieces of prep report's one HTML file, which needs nothing outside itself (no script, no
stylesheet or font to fetch, every image inline): it opens offline, and can be mailed. Charts are
matplotlib figures as inline SVG, never through pyplot (no window, no global figure state), text
kept as text and no date, so that the same data gives the same bytes.

>>> "<svg" in histograms([("width", np.array([1.0, 2.0, 2.0]))], bins=2)
True
"""

from __future__ import annotations

import base64
import html
import io
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

THUMB_QUALITY = 80  # JPEG quality of embedded thumbnails: a 128 px tile is about 4 KB
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

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 2em 2em; color: #222; background: #fafafa; }
header { border-bottom: 1px solid #ccc; margin-bottom: 1em; }
nav a { margin-right: 1em; }
main { display: grid; grid-template-columns: repeat(auto-fit, minmax(440px, 1fr)); gap: 1em; }
section { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 0.5em 1em 1em;
  min-width: 0; overflow-x: auto; }
section.wide { grid-column: 1 / -1; }
h2 { margin: 0.3em 0; font-size: 1.2em; }
h3 { margin: 0.8em 0 0.3em; font-size: 1em; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: left;
  font-variant-numeric: tabular-nums; }
th { background: #f0f0f0; }
.grid { display: flex; flex-wrap: wrap; gap: 6px; align-items: flex-start; }
figure { margin: 0; font-size: 11px; max-width: 260px; overflow-wrap: anywhere; }
figure img { display: block; background: #181818; image-rendering: pixelated; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.charts svg { max-width: 100%; height: auto; }
.note { color: #666; }
.bad { color: #b00020; font-weight: bold; }
.good { color: #1b7a1b; font-weight: bold; }
code { background: #f2f2f2; padding: 0 3px; }
"""


@dataclass(frozen=True)
class Section:
    """One `<section>` of the page: `body` is HTML; `wide` spans the page's width."""

    id: str
    title: str
    body: str
    wide: bool = False

    def html(self) -> str:
        wide = ' class="wide"' if self.wide else ""
        return (
            f'<section id="{self.id}"{wide}>\n<h2>{esc(self.title)}</h2>\n{self.body}\n</section>'
        )


def esc(value: object) -> str:
    """Text for HTML: every &, <, >, quote escaped (paths and class names come from users)."""
    return html.escape(str(value), quote=True)


def jpeg_uri(rgb: np.ndarray, quality: int = THUMB_QUALITY) -> str:
    """An (H, W, 3) or (H, W) uint8 picture as a data:image/jpeg;base64 URI."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb)).save(buf, "JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def figure(rgb: np.ndarray, caption: str, title: str = "") -> str:
    """A thumbnail with its caption under it (`title`: the tooltip, e.g. a full path)."""
    h, w = rgb.shape[:2]
    tip = f' title="{esc(title)}"' if title else ""
    return (
        f'<figure><img src="{jpeg_uri(rgb)}" width="{w}" height="{h}" alt="{esc(caption)}"{tip}>'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def grid(items: Sequence[str]) -> str:
    return '<div class="grid">' + "".join(items) + "</div>"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An HTML table of `rows` (each cell escaped)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def para(text: str, cls: str = "") -> str:
    return f'<p class="{cls}">{esc(text)}</p>' if cls else f"<p>{esc(text)}</p>"


def page(title: str, lead: Sequence[str], sections: Sequence[Section]) -> str:
    """The document: a header (title, `lead` lines, links to each section), then the sections."""
    nav = "".join(f'<a href="#{s.id}">{esc(s.title)}</a>' for s in sections)
    lines = "".join(para(line) for line in lead)
    body = "\n".join(s.html() for s in sections)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n"
        f"<body><header><h1>{esc(title)}</h1>{lines}<nav>{nav}</nav></header>\n"
        f"<main>{body}</main>\n</body></html>\n"
    )


@contextmanager
def _figure(width: float, height: float) -> Iterator[Any]:
    """A figure of `width` x `height` inches, made and saved (svg) under RC."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):
        yield Figure(figsize=(width, height), layout="constrained")


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
    """Grouped bars: a group a class (in first-seen order), a bar a series, its count above it."""
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


def histograms(panels: Sequence[tuple[str, np.ndarray]], bins: int = 30, log: bool = False) -> str:
    """Histograms side by side, a (label, values) panel each, NaN left out (counted)."""
    with _figure(3.2 * len(panels), 2.6) as fig:
        for k, (label, values) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), k + 1)
            v = np.asarray(values, dtype=np.float64)
            nan = int(np.isnan(v).sum())
            v = v[~np.isnan(v)]
            ax.hist(v, bins=bins if len(v) else 1, color=COLOURS[k % 6], log=log)
            ax.set_xlabel(label + (f" ({nan} missing)" if nan else ""))
        return svg(fig)


def categories(panels: Sequence[tuple[str, Sequence[str], Sequence[int]]]) -> str:
    """Horizontal bars side by side, one a (label, names, counts) panel, largest on top."""
    tallest = max((len(names) for _, names, _ in panels), default=1)
    with _figure(3.4 * len(panels), 1.0 + 0.22 * min(tallest, MAX_BARS)) as fig:
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
