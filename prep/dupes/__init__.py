"""Near-duplicates and train/val leakage from the hashes `prep pack` stores per sample.

`prep pack` stores each image's 64-bit perceptual hash (`phash`, prep.dupes.hashing) and the
sha256 of its smallest stored pixels (`digest`: equal for exact duplicates). `near_pairs` finds
every pair within a Hamming distance well under quadratic time (prep.dupes.search);
`dupe_groups` links them into groups, `leakage` lists the pairs between two datasets (train and
val).

>>> import numpy as np
>>> h = Hashes(np.array([5, 7, 1 << 40], np.uint64), np.zeros((3, 32), np.uint8), ["a", "b", "c"])
>>> h.digest[2] = 1  # a, b: the same pixels; c: other pixels
>>> [(g.members, g.distances) for g in dupe_groups(h, max_distance=2)]
[([0, 1], [0, 1])]
"""

from __future__ import annotations

import numpy as np

from prep.dupes.groups import DEFAULT_DISTANCE, Group, dupe_groups, leakage
from prep.dupes.search import near_pairs as _near_pairs
from prep.dupes.stored import Hashes, dataset_hashes


def near_pairs(
    a: np.ndarray, b: np.ndarray | None = None, max_distance: int = DEFAULT_DISTANCE
) -> np.ndarray:
    """(K, 3) int64 rows (i, j, distance), sorted: pairs within `a` (i < j), or between `a`
    and `b` (i in a, j in b), at most `max_distance` bits apart."""
    return _near_pairs(a, b, max_distance)


__all__ = [
    "DEFAULT_DISTANCE",
    "Group",
    "Hashes",
    "dataset_hashes",
    "dupe_groups",
    "leakage",
    "near_pairs",
]
