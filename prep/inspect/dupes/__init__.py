"""Near-duplicates and train/val leakage from the hashes `prep pack` stores per sample.

`prep pack` stores each image's 64-bit perceptual hash (`phash`, prep.media.image.hashing) and the
sha256 of its smallest stored pixels (`digest`: equal for exact duplicates). `near_pairs` finds
every pair within a Hamming distance well under quadratic time (prep.media.image.near);
`dupe_groups` links them into groups, `leakage` lists the pairs between two datasets (train and
val). Those two and the stored hashes' reader load when first used: `prep --help` and `prep pack`
need none of them.

>>> import numpy as np
>>> from prep.inspect.dupes import Hashes, dupe_groups
>>> h = Hashes(np.array([5, 7, 1 << 40], np.uint64), np.zeros((3, 32), np.uint8), ["a", "b", "c"])
>>> h.digest[2] = 1  # a, b: the same pixels; c: other pixels
>>> [(g.members, g.distances) for g in dupe_groups(h, max_distance=2)]
[([0, 1], [0, 1])]
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from prep.media.image.near import DEFAULT_DISTANCE, near_pairs

if TYPE_CHECKING:
    from prep.inspect.dupes.stored import dataset_hashes
    from prep.media.image.groups import Group, Hashes, dupe_groups, leakage

GROUPS = "prep.media.image.groups"
_HOME = {"Group": GROUPS, "dupe_groups": GROUPS, "leakage": GROUPS, "Hashes": GROUPS}
_HOME |= {"dataset_hashes": "prep.inspect.dupes.stored"}


def __getattr__(name: str) -> Any:
    """The names of `_HOME`, each imported from its module on first use."""
    if name not in _HOME:
        raise AttributeError(f"module 'prep.inspect.dupes' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)


__all__ = [
    "DEFAULT_DISTANCE",
    "Group",
    "Hashes",
    "dataset_hashes",
    "dupe_groups",
    "leakage",
    "near_pairs",
]
