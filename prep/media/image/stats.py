"""Per-channel mean and std of the pixels stored at each size (before JPEG encoding), counted
exactly by the shard tasks and combined into the manifest's `extra.stats` (0-255 units, ddof=0):
{"split": "train" | null (every shard), "sizes": {"224": {"mean": [...], "std": [...],
"pixels": n}}}; a samples dataset keeps one a field: {field: {"split": ..., "sizes": ...}}.

>>> sums = PixelSums()
>>> sums.add({2: np.array([[[0], [2]]], dtype=np.uint8)})
>>> combine([{"stats": sums.record(), "shard": {}}])["sizes"]["2"]
{'mean': [1.0], 'std': [1.0], 'pixels': 2}
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

LEVELS = np.arange(256, dtype=np.int64)


class PixelSums:
    """One shard's count of each channel's values at each size: (C, 256) int64, exact."""

    def __init__(self) -> None:
        self.counts: dict[int, np.ndarray] = {}

    def add(self, pixels: dict[int, np.ndarray]) -> None:
        """One sample's uint8 pixels at each size: (H, W, C), or (H, W) gray."""
        for size, arr in pixels.items():
            flat = arr.reshape(-1, arr.shape[2] if arr.ndim == 3 else 1)
            got = np.stack([np.bincount(flat[:, c], minlength=256) for c in range(flat.shape[1])])
            have = self.counts.get(size)
            self.counts[size] = got if have is None else have + got

    def record(self) -> dict[str, dict[str, Any]]:
        """Each size's pixel count and its channels' sums of values and of squares (ints)."""
        return {
            str(size): {
                "pixels": int(n.sum(axis=1)[0]),
                "sum": [int(v) for v in n @ LEVELS],
                "sumsq": [int(v) for v in n @ (LEVELS * LEVELS)],
            }
            for size, n in sorted(self.counts.items())
        }


def combine(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """`extra.stats` of the train split's shard records (all without one), or None."""
    train = [r for r in records if r["shard"].get("split") == "train"]
    split = "train" if train else None
    if not train:
        train = records
    if not train or any("stats" not in r for r in train):
        return None
    sizes: dict[str, dict[str, Any]] = {}
    for size in sorted({s for r in train for s in r["stats"]}, key=int):
        parts = [r["stats"][size] for r in train if size in r["stats"]]
        n = sum(p["pixels"] for p in parts)
        if n == 0:
            continue
        s = [sum(v) for v in zip(*(p["sum"] for p in parts), strict=True)]
        q = [sum(v) for v in zip(*(p["sumsq"] for p in parts), strict=True)]
        # Exact integers until the last division: n * q - s^2 is n^2 times the variance.
        mean = [round(si / n, 4) for si in s]
        var = [(n * qi - si * si) / (n * n) for si, qi in zip(s, q, strict=True)]
        std = [round(math.sqrt(v), 4) for v in var]
        sizes[size] = {"mean": mean, "std": std, "pixels": n}
    return {"split": split, "sizes": sizes}
