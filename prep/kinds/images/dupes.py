"""`prep pack --drop-dupes`: a hashing pass over the listed images before the plan (a JPEG decoded
at 1/8 scale); all but the first of each group become `duplicate` rejects naming the kept one.
The kept hashes are stored as they are: `prep dupes` on the dataset agrees."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from prep.kinds.images.config import PackConfig
from prep.media.image.decode import decode_image
from prep.media.image.groups import DIGEST_BYTES, Hashes, dupe_groups, image_phash
from prep.run.inputs import Reject, reject_record
from prep.run.parallel import progress
from prep.sources.images import Item

HINT_SIDE = 64  # decode at the DCT scale that keeps 64 px: plenty for a 32 px thumbnail


def _hash_one(item: Item, cfg: PackConfig) -> int | None:
    """The pHash of one input; None when it cannot be decoded (its shard task rejects it)."""
    try:
        img, _ = decode_image(
            item.path, (HINT_SIDE,), cfg.gray, cfg.max_pixels, "fill", cfg.background_rgb()
        )
    except (Reject, OSError):
        return None
    return image_phash(img)


def drop_dupes(
    items: list[Item], cfg: PackConfig, show_progress: bool
) -> tuple[list[Item], list[dict[str, Any]], dict[str, int]]:
    """The items kept (the first of each near-duplicate group), the others' rejects, and each
    kept item's pHash."""
    got = []  # each item's pHash, None: not decodable; on cfg.n_jobs threads
    with (
        progress(len(items), "img", "hash", show_progress) as bar,
        ThreadPoolExecutor(max(1, cfg.n_jobs)) as pool,
    ):
        for h in pool.map(lambda it: _hash_one(it, cfg), items):
            got.append(h)
            bar.update(1)
    ok = [k for k, g in enumerate(got) if g is not None]
    phash = np.array([got[k] for k in ok], dtype=np.uint64)
    dropped: set[int] = set()
    rejects = []
    no_digests = np.zeros((0, DIGEST_BYTES), np.uint8)  # pHashes alone link these inputs
    for g in dupe_groups(Hashes(phash, no_digests, [items[k].rel for k in ok]), cfg.max_distance):
        for member, path, dist in zip(g.members[1:], g.paths[1:], g.distances[1:], strict=True):
            dropped.add(ok[member])
            why = (
                f"a near-duplicate of {g.paths[0]}, which is kept (perceptual hashes {dist} "
                f"bits apart, --max-distance {cfg.max_distance})"
            )
            rejects.append(reject_record(path, "duplicate", why))
    kept = [it for k, it in enumerate(items) if k not in dropped]
    known = {items[k].rel: int(phash[n]) for n, k in enumerate(ok) if k not in dropped}
    return kept, rejects, known
