"""Near-duplicates from perceptual hashes: one dataset's hashes, its groups of near twins, and the
leakage between two datasets (prep dupes, prep pack --drop-dupes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prep.media.image.near import DEFAULT_DISTANCE, near_pairs


@dataclass
class Hashes:
    """One dataset's hashes, in sample order."""

    phash: np.ndarray  # (N,) uint64 perceptual hash (prep.media.image.hashing.phash)
    digest: np.ndarray  # (N, 32) uint8 sha256 of the stored pixels (hashing.pixel_digest)
    paths: list[str]  # each sample's source path, relative, as stored ("#i" when none is)
    splits: list[str] | None = None  # each sample's split, for a dataset with splits

    def __len__(self) -> int:
        return len(self.phash)

    def splits_of(self, members: list[int]) -> list[str]:
        """The splits samples `members` lie in, in order of first appearance."""
        return [] if self.splits is None else list(dict.fromkeys(self.splits[i] for i in members))

    def split_at(self, i: int) -> str:
        """ " SPLIT" of sample i, for a caption ("" without splits)."""
        return "" if self.splits is None else f" {self.splits[i]}"


@dataclass
class Group:
    """Near-duplicates: `members` in dataset order, the first the one to keep; `distances[k]`
    is member k's Hamming distance to members[0] (a chain of near pairs can make it larger than
    the search's)."""

    members: list[int]
    paths: list[str]
    distances: list[int]


def _components(n: int, pairs: np.ndarray) -> np.ndarray:
    """Each of n items' component label (its smallest member) under the (i, j) links."""
    labels = np.arange(n)
    if not len(pairs):
        return labels
    i, j = pairs[:, 0], pairs[:, 1]
    while True:
        low = np.minimum(labels[i], labels[j])
        before = labels.copy()
        np.minimum.at(labels, i, low)
        np.minimum.at(labels, j, low)
        labels = labels[labels]  # pointer jumping: halves each chain
        if np.array_equal(labels, before):
            return labels


def digest_pairs(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """(K, 2) pairs of samples with the same stored pixels (equal digests): within `a` (each
    item linked to the first of its digest), or between `a` and `b` (i in a, j in b)."""
    rows = np.ascontiguousarray(a if b is None else np.concatenate([a, b]), dtype=np.uint8)
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    head = first[inverse.reshape(-1)]
    idx = np.flatnonzero(head != np.arange(len(rows)))
    pairs = np.stack([head[idx], idx], axis=1)
    if b is None:
        return pairs
    na = len(a)
    cross = [(i, j - na) for i, j in pairs.tolist() if i < na <= j]
    # Duplicates within b point at b's first copy: link a's copy to every b copy of it.
    return np.array(cross, dtype=np.int64).reshape(-1, 2)


def dupe_groups(h: Hashes, max_distance: int = DEFAULT_DISTANCE) -> list[Group]:
    """The groups of samples linked by near pairs or equal digests, by their first member."""
    return phash_groups(h.phash, h.paths, max_distance, h.digest)


def phash_groups(
    phash: np.ndarray, paths: list[str], max_distance: int, digest: np.ndarray | None = None
) -> list[Group]:
    """dupe_groups of bare pHashes (`digest` None: no links by equal stored pixels)."""
    uniq, first, inverse = _distinct(phash)
    links = first[near_pairs(uniq, max_distance=max_distance)[:, :2]].reshape(-1, 2)
    heads = first[inverse]  # an equal hash links to its first holder: n links, not n^2 pairs
    repeat = np.flatnonzero(heads != np.arange(len(phash)))
    links = np.concatenate([links, np.stack([heads[repeat], repeat], axis=1)])
    if digest is not None and len(digest):
        links = np.concatenate([links, digest_pairs(digest)])
    labels = _components(len(phash), links)
    members = np.flatnonzero(labels != np.arange(len(phash)))
    groups: dict[int, list[int]] = {}
    for k in np.unique(np.r_[members, labels[members]]).tolist():
        groups.setdefault(int(labels[k]), []).append(k)
    out = []
    for head, ids in sorted(groups.items()):
        dist = np.bitwise_count(phash[ids] ^ phash[head]).astype(int).tolist()
        out.append(Group(ids, [paths[k] for k in ids], dist))
    return out


def _distinct(phash: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct hashes, the first index of each, each item's distinct hash): the search runs
    on distinct hashes (a thousand copies of one blank image are not a million pairs)."""
    uniq, first, inverse = np.unique(
        np.asarray(phash, dtype=np.uint64), return_index=True, return_inverse=True
    )
    return uniq, first.astype(np.int64), inverse.reshape(-1)


def _holders(inverse: np.ndarray, k: int) -> list[np.ndarray]:
    """The items of each of `k` distinct hashes, in item order."""
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.cumsum(np.bincount(inverse, minlength=k))[:-1])


def leakage(
    train: Hashes, val: Hashes, max_distance: int = DEFAULT_DISTANCE
) -> list[tuple[int, int, int]]:
    """Sorted (train index, val index, distance) of the near pairs and equal digests."""
    (ua, _, ia), (ub, _, ib) = _distinct(train.phash), _distinct(val.phash)
    ha, hb = _holders(ia, len(ua)), _holders(ib, len(ub))
    found: dict[tuple[int, int], int] = {}
    for u, v, d in near_pairs(ua, ub, max_distance).tolist():
        found |= {(i, j): d for i in ha[u].tolist() for j in hb[v].tolist()}
    for i, j in digest_pairs(train.digest, val.digest).tolist():
        found.setdefault((i, j), int(np.bitwise_count(train.phash[i] ^ val.phash[j])))
    return sorted((i, j, d) for (i, j), d in found.items())
