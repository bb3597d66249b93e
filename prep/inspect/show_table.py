"""`prep info` and `prep preview` for table datasets: the columns as stored, the first rows
decoded back (codes to their values, times to ISO dates). Numpy only: no torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import Manifest, open_array, read_manifest
from prep.media.table.types import MISSING, NAT, first_of


def describe(m: Manifest) -> list[str]:
    """One line per column: array, role, kind, stored dtype, missing count, vocabulary size."""
    arrays = {col: name for name, col in m.extra["arrays"].items() if not name.startswith("miss")}
    splits = ", ".join(f"{n:,} {s}" for s, n in m.extra["splits"].items())
    lines = [f"rows: {splits}; target {m.extra.get('target')}"]
    target: dict[str, Any] = next((c for c in m.extra["columns"] if c.get("role") == "target"), {})
    if "vocab" in target and first_of(target) == 0:  # class ids 0..K-1
        names = target["vocab"]
        shown = ", ".join(map(str, names[:10])) + (" ..." if len(names) > 10 else "")
        lines.append(f"classes ({len(names)}), ids 0..{len(names) - 1}: {shown}")
    lines.append(
        f"{'column':<20}{'array':<10}{'role':<8}{'kind':<8}{'dtype':<9}{'missing':>9}  vocab"
    )
    for c in m.extra["columns"]:
        vocab = f"{len(c['vocab']):,}" if "vocab" in c else "-"
        lines.append(
            f"{c['name'][:19]:<20}{arrays.get(c['name'], '-'):<10}{c['role']:<8}{c['kind']:<8}"
            f"{c['dtype']:<9}{c['missing']:>9,}  {vocab}"
        )
    return lines


def _cell(value: Any, col: dict[str, Any]) -> str:
    if "vocab" in col:
        code, first = int(value), first_of(col)
        if code >= first:
            return str(col["vocab"][code - first])
        return "" if code == MISSING else "<unseen>"
    if col["kind"] == "time":
        return "" if int(value) == NAT else str(np.datetime64(int(value), "ns"))[:19]
    if isinstance(value, np.floating) and np.isnan(value):
        return ""
    return f"{value:g}" if isinstance(value, np.floating) else str(value)


def first_rows(root: Path, count: int = 10) -> str:
    """The first `count` rows of the dataset (manifest order), decoded, as a plain table."""
    m = read_manifest(root)
    cols = {c["name"]: c for c in m.extra["columns"]}
    order = list(cols)
    names = {
        n: col
        for n, col in sorted(m.extra["arrays"].items(), key=lambda a: order.index(a[1]))
        if not n.startswith("missing")
    }
    values: dict[str, list[Any]] = {n: [] for n in names}
    splits: list[str] = []
    for shard in m.shards:
        take = min(count - len(splits), shard.count)
        if take <= 0:
            break
        for n in names:
            values[n] += list(open_array(root, shard.arrays[n], m.arrays[n], n)[:take])
        splits += [str(shard.split)] * take
    header = ["split", *names.values()]
    rows = [
        [splits[i], *(_cell(values[n][i], cols[col]) for n, col in names.items())]
        for i in range(len(splits))
    ]
    widths = [min(20, max(len(str(r[j])) for r in [header, *rows])) for j in range(len(header))]
    return "\n".join(
        "  ".join(str(v)[:20].ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    )
