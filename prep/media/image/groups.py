"""Near-duplicates: 64-bit perceptual hashes of grey thumbnails (bits most significant first:
hash ^ hash, popcounted, is the Hamming distance) and the exact pixel digest; one dataset's
groups of near twins, and the leakage between two (prep dupes, prep pack --drop-dupes).

>>> flat = np.zeros((1, 32, 32), np.uint8)
>>> int(phash(flat)[0])
0
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from prep.media.image.near import DEFAULT_DISTANCE, near_pairs

PHASH_SIDE = 32  # the pHash thumbnail; its DCT keeps rows and columns 1..8
DIGEST_BYTES = 32  # sha256


# The DCT-II basis, unnormalised (every row on one scale), (8, 32): frequencies 0..7.
_K, _X = np.arange(8, dtype=np.float64)[:, None], np.arange(PHASH_SIDE, dtype=np.float64)
_BASIS = np.cos(np.pi * _K * (2 * _X + 1) / (2 * PHASH_SIDE)).astype(np.float32)
_HANN = np.hanning(PHASH_SIDE + 2)[1:-1].astype(np.float32)  # no zero weights at the ends
WINDOW = np.outer(_HANN, _HANN)  # (32, 32)


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """(N, 64) bool -> (N,) uint64, the first bit the most significant."""
    packed = np.packbits(np.ascontiguousarray(bits).reshape(len(bits), 64), axis=1, bitorder="big")
    return packed.view(">u8").reshape(-1).astype(np.uint64)


def phash(gray: np.ndarray) -> np.ndarray:
    """(N, 32, 32) uint8 grey thumbnails -> (N,) uint64: Hann-windowed (crops act at the border),
    the 8x8 lowest DCT-II frequencies, a bit 1 above their median (half the bits are ones)."""
    x = np.asarray(gray, dtype=np.float32) * WINDOW
    coef = _BASIS @ x @ _BASIS.T  # (N, 8, 8): one matmul pair for the whole batch
    flat = coef.reshape(len(x), 64)
    mid = np.sort(flat, axis=1)[:, 31:33].mean(axis=1, keepdims=True)  # np.median, 3x cheaper
    return pack_bits(flat > mid)


def thumbnail(img: np.ndarray, shape: tuple[int, int] = (PHASH_SIDE, PHASH_SIDE)) -> np.ndarray:
    """(H, W, 3) RGB or (H, W) grey uint8 -> its (h, w) grey thumbnail, area-averaged."""
    # A bilinear step to a whole multiple first: INTER_AREA's integer path, a quarter cheaper.
    import cv2

    gray = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY) if img.ndim == 3 else img
    (h, w), (th, tw) = gray.shape[:2], shape
    fy, fx = max(1, h // th), max(1, w // tw)
    if (h, w) != (th * fy, tw * fx):
        gray = cv2.resize(gray, (tw * fx, th * fy), interpolation=cv2.INTER_LINEAR)
    return cv2.resize(gray, (tw, th), interpolation=cv2.INTER_AREA)


def image_phash(img: np.ndarray) -> int:
    """The pHash of one decoded image."""
    return int(phash(thumbnail(img)[None])[0])


def pixel_digest(pixels: np.ndarray) -> np.ndarray:
    """sha256 of a stored sample's pixels and shape, (32,) uint8."""
    hwc = pixels.reshape(pixels.shape[0], pixels.shape[1], -1)  # grey: (H, W) as (H, W, 1)
    h = hashlib.sha256(np.asarray(hwc.shape, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(hwc, dtype=np.uint8).data)
    return np.frombuffer(h.digest(), dtype=np.uint8).copy()


@dataclass
class Hashes:
    """One dataset's hashes, in sample order."""

    phash: np.ndarray  # (N,) uint64 perceptual hash (phash)
    digest: np.ndarray  # (N, 32) uint8 sha256 of the stored pixels (pixel_digest)
    paths: list[str]  # each sample's source path, relative, as stored ("#i" when none is)
    splits: list[str] | None = None  # each sample's split, for a dataset with splits

    def __len__(self) -> int:
        return len(self.phash)

    def splits_of(self, members: list[int]) -> list[str]:
        """The splits samples `members` lie in, in order of first appearance."""
        return [] if self.splits is None else list(dict.fromkeys(self.splits[i] for i in members))


@dataclass
class Group:
    """Near-duplicates in dataset order, the first kept; `distances[k]`: member k's to the first
    (a chain of near pairs can make it larger than the search's)."""

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
    """(K, 2) pairs with equal digests: within `a`, or between `a` and `b` (i in a, j in b)."""
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
    phash, paths, digest = h.phash, h.paths, h.digest
    uniq, first, inverse = _distinct(phash)
    links = first[near_pairs(uniq, max_distance=max_distance)[:, :2]].reshape(-1, 2)
    heads = first[inverse]  # an equal hash links to its first holder: n links, not n^2 pairs
    repeat = np.flatnonzero(heads != np.arange(len(phash)))
    links = np.concatenate([links, np.stack([heads[repeat], repeat], axis=1)])
    if len(digest):
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
    """(distinct hashes, the first index of each, each item's distinct hash)."""
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
