"""`prep info` of a volume dataset: each volume's stored shape and spacing, or a summary of
them for many volumes (the manifest holds both; no voxel is read)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from loaders.format import Manifest

LISTED = 10  # up to this many volumes, one line each


def _shape(v: dict[str, Any]) -> str:
    return "x".join(str(int(n)) for n in v.get("shape", []))


def _spacing(v: dict[str, Any]) -> str:
    return "x".join(f"{float(s):g}" for s in v.get("spacing", [])) + " mm"


def _ranges(values: np.ndarray, fmt: str) -> str:
    """Per axis min..max (one number where they agree), axes joined by x."""
    parts = [
        format(lo, fmt) if lo == hi else f"{lo:{fmt}}..{hi:{fmt}}"
        for lo, hi in zip(values.min(0).tolist(), values.max(0).tolist(), strict=True)
    ]
    return "x".join(parts)


def describe_volumes(m: Manifest) -> list[str]:
    """Lines for prep info: the orientation, then per-volume shape and spacing (a summary:
    ranges per axis and the commonest shapes, when there are more than LISTED volumes)."""
    volumes = [v for v in m.extra.get("volumes", []) if isinstance(v, dict)]
    lines = [f"orientation {m.extra.get('orient', '?')} (axis k increases toward letter k)"]
    if not volumes:
        return lines
    if len(volumes) <= LISTED:
        width = min(40, max(len(str(v.get("path", ""))) for v in volumes))
        for i, v in enumerate(volumes):
            name = str(v.get("path", ""))[:40]
            lines.append(f"{i:>4} {name:<{width}}  {_shape(v):<14}  spacing {_spacing(v)}")
        return lines
    shapes = np.array([v["shape"] for v in volumes], dtype=np.int64)
    spacing = np.array([v["spacing"] for v in volumes], dtype=np.float64)
    common = Counter(_shape(v) for v in volumes).most_common(3)
    said = ", ".join(f"{s} ({n})" for s, n in common)
    lines.append(
        f"shapes (D x H x W): {_ranges(shapes, 'd')}; {len(set(map(tuple, shapes.tolist())))} "
        f"distinct, commonest {said}"
    )
    lines.append(f"spacing (mm): {_ranges(spacing, 'g')}")
    return lines
