"""Near-duplicates and train/val leakage from the hashes `prep pack` stores per sample: each
image's 64-bit perceptual hash (`phash`, prep.media.image.hashing) and the sha256 of its smallest
stored pixels (`digest`: equal for exact duplicates). `near_pairs` finds every pair within a
Hamming distance well under quadratic time (prep.media.image.near); `dupe_groups` links them into
groups, `leakage` lists the pairs between two datasets (train and val).

>>> h = Hashes(np.array([5, 7, 1 << 40], np.uint64), np.zeros((3, 32), np.uint8), ["a", "b", "c"])
>>> h.digest[2] = 1  # a, b: the same pixels; c: other pixels
>>> [(g.members, g.distances) for g in dupe_groups(h, max_distance=2)]
[([0, 1], [0, 1])]
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from loaders.fields import Image
from prep.inspect.stored import Stored
from prep.media.image.groups import Hashes, dupe_groups, leakage
from prep.media.image.hashing import DIGEST_BYTES, phash, pixel_digest, thumbnail
from prep.media.image.near import DEFAULT_DISTANCE, near_pairs
from prep.run.errors import PrepError

__all__ = ["DEFAULT_DISTANCE", "Hashes", "dataset_hashes", "dupe_groups", "leakage", "near_pairs"]

CHUNK = 256  # images hashed at a time when computing from stored pixels


def dataset_hashes(root: str | Path, compute: bool = False, split: str | None = None) -> Hashes:
    """The hashes stored in the dataset at `root` (of its split `split` only, in the order
    `SampleDataset(root, split=split)` indexes it). A dataset packed without them (an import, an
    older pack): computed from its image field's stored pixels when `compute` (the pHash from
    the largest size: close to, not equal to, what pack stores; the digest from the smallest,
    as pack makes it), else PrepError."""
    root = Path(root)
    if not (root / "manifest.json").is_file():
        raise PrepError(f"{root} is not a packed dataset. HINT: pass the OUT of a prep command")
    st = Stored(root, split=split)
    stored = "phash" in st.m.arrays and "digest" in st.m.arrays
    image = next((n for n, f in st.fields.items() if isinstance(f, Image)), None)
    if not stored and image is None:  # before the --hash hint: it would not help
        raise PrepError(
            f"{root} has no image field: near-duplicates are found among images. "
            "HINT: pass a dataset with images"
        )
    if not stored and not compute:
        raise PrepError(
            f"{root} was packed without per-sample hashes (phash, digest). "
            f"HINT: run prep report {root} --hash (or prep dupes {root} --hash) to compute "
            "them from the stored pixels, or pack it again"
        )
    paths = st.sources()
    splits = st.splits().tolist() if st.m.splits else None
    if stored:
        ph, dg = st.column("phash").astype(np.uint64), st.column("digest").astype(np.uint8)
        return Hashes(ph, dg.reshape(-1, DIGEST_BYTES), paths, splits)
    assert image is not None
    sizes = st.fields[image].sizes  # type: ignore[attr-defined]
    big, small = Stored(root, max(sizes), split), Stored(root, min(sizes), split)
    from prep.run.parallel import progress

    bar = progress(len(st), "img", "hash")  # on a terminal
    got: list[tuple[np.ndarray, np.ndarray]] = []
    pixels = ((big.value(image, i), small.value(image, i)) for i in range(len(st)))
    while chunk := list(itertools.islice(pixels, CHUNK)):
        got.append(_hash_chunk(chunk))
        bar.update(len(chunk))
    bar.close()
    ph = np.concatenate([p for p, _ in got]) if got else np.zeros(0, np.uint64)
    dg = np.concatenate([d for _, d in got]) if got else np.zeros((0, DIGEST_BYTES), np.uint8)
    return Hashes(ph, dg.reshape(-1, DIGEST_BYTES), paths, splits)


def _hash_chunk(images: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """pHashes of a few stored images (largest size), and their pixel digests (smallest)."""
    thumbs = np.stack([thumbnail(big[..., 0] if big.shape[-1] == 1 else big) for big, _ in images])
    return phash(thumbs), np.stack([pixel_digest(small) for _, small in images])
