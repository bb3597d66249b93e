"""The pieces of prep report's one HTML file, which needs nothing outside itself (no script, no
stylesheet or font to fetch, every image inline as a JPEG data: URI): it opens offline, mailed."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

THUMB_QUALITY = 80  # JPEG quality of embedded thumbnails: a 128 px tile is about 4 KB

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
