"""`extra.stats`: the per-channel mean and std a pack stores per image size (prep.kinds.images
.stats), checked as Normalize.from_dataset and the report read them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from loaders.format.spec import FormatError


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_stats(got: object, what: str, sizes: Iterable[int | None], channels: int | None) -> None:
    """`what` (extra.stats, or extra.stats.FIELD of a samples dataset): a split (or null) and
    at each stored size a mean and std per channel (`channels`; None: 1 or 3) and a pixel count
    (prep.media.image.stats), as Normalize.from_dataset and the report read them."""
    at_sizes = got.get("sizes") if isinstance(got, dict) else None
    split = got.get("split") if isinstance(got, dict) else None
    if not isinstance(at_sizes, dict) or not (split is None or isinstance(split, str)):
        raise FormatError(f"{what} is not a split and sizes")
    stored = {str(s) for s in sizes}
    for size, at in at_sizes.items():
        if size not in stored or not _mean_std(at, channels):
            raise FormatError(f"{what} at {size!r:.20} is not a mean and std")


def _mean_std(at: Any, channels: int | None) -> bool:
    """{"mean": [...], "std": [...], "pixels": n}: a finite number a channel, a count."""
    if not isinstance(at, dict) or not _count(at.get("pixels")):
        return False
    lists: list[Any] = [at.get("mean"), at.get("std")]
    n = len(lists[0]) if channels is None and isinstance(lists[0], list) else channels
    return (
        n in (1, 3)
        and all(isinstance(v, list) and len(v) == n and all(_number(x) for x in v) for v in lists)
        and all(math.isfinite(x) for v in lists for x in v)
        and min(at["std"]) >= 0
    )
