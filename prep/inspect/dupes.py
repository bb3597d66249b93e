"""Near-duplicates and train/val leakage from the hashes `prep pack` stores per sample (`phash`:
an image's 64-bit perceptual hash; `digest`: of its smallest stored pixels), as pairs
(prep.media.image.near), groups and leaks (prep.media.image.groups) and prep report's sections.

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
from prep.inspect.html import Section, esc, grid, para, table
from prep.inspect.pages import thumbs
from prep.inspect.stored import Stored
from prep.media.image.groups import (
    DIGEST_BYTES,
    Hashes,
    dupe_groups,
    leakage,
    phash,
    pixel_digest,
    thumbnail,
)
from prep.media.image.near import DEFAULT_DISTANCE, near_pairs
from prep.run.errors import PrepError
from prep.run.parallel import progress

__all__ = ["DEFAULT_DISTANCE", "Hashes", "dataset_hashes", "dupe_groups", "leakage", "near_pairs"]

CHUNK = 256  # images hashed at a time when computing from stored pixels
GROUPS_SHOWN = 16  # groups drawn (largest first); the rest counted
MEMBERS_SHOWN = 8  # thumbnails a group row
PAIRS_SHOWN = 32  # leaking pairs drawn; the rest listed in the count
LEAK_LIMIT = 0.001  # a val share with a train twin above this fails the check (Deepchecks' style)


def dataset_hashes(root: str | Path, compute: bool = False, split: str | None = None) -> Hashes:
    """The hashes stored at `root` (in SampleDataset's order), else computed from the stored
    pixels when `compute` (close to what pack stores), else PrepError."""
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
    got = [(np.zeros(0, np.uint64), np.zeros((0, DIGEST_BYTES), np.uint8))]
    if stored:
        got.append((st.column("phash"), st.column("digest").reshape(-1, DIGEST_BYTES)))
    else:
        assert image is not None
        sizes = st.fields[image].sizes  # type: ignore[attr-defined]
        big, small = Stored(root, max(sizes), split), Stored(root, min(sizes), split)
        bar = progress(len(st), "img", "hash")  # on a terminal
        pixels = ((big.value(image, i), small.value(image, i)) for i in range(len(st)))
        while chunk := list(itertools.islice(pixels, CHUNK)):
            grey = [hi[..., 0] if hi.shape[-1] == 1 else hi for hi, _ in chunk]  # the largest
            digests = np.stack([pixel_digest(lo) for _, lo in chunk])  # the smallest, as pack
            got.append((phash(np.stack([thumbnail(g) for g in grey])), digests))
            bar.update(len(chunk))
        bar.close()
    ph, dg = np.concatenate([p for p, _ in got]), np.concatenate([d for _, d in got])
    return Hashes(ph.astype(np.uint64), dg.astype(np.uint8), paths, splits)


def _hashes(root: Path, compute: bool) -> tuple[Hashes | None, str]:
    """The dataset's hashes, or None and why not (an older dataset without --hash)."""
    try:
        return dataset_hashes(root, compute=compute), ""
    except PrepError as e:
        return None, str(e)


def _thumbs(st: Stored, indices: list[int], captions: list[str]) -> list[str]:
    """Figures of samples `indices` as stored (their image field's, at the smallest size)."""
    picture = st.picture()
    if picture is None or not indices:
        return [f"<figure>{esc(c)}</figure>" for c in captions]
    return [t for one in thumbs(st, picture, indices, captions) for t in one]


def groups_section(st: Stored, compute: bool) -> Section:
    """The near-duplicate groups, largest first, as thumbnail rows; one across splits marked."""
    h, why = _hashes(st.root, compute)
    if h is None:
        return Section("dupes", "Near-duplicates", para(why, "note"))
    groups = sorted(dupe_groups(h, DEFAULT_DISTANCE), key=lambda g: -len(g.members))
    extra = sum(len(g.members) - 1 for g in groups)
    crossing = [g for g in groups if len(h.splits_of(g.members)) > 1]
    across = f"; {len(crossing):,} cross splits" if crossing else ""
    head = para(
        f"{len(groups):,} groups of near-duplicates (Hamming distance <= {DEFAULT_DISTANCE} of 64 "
        f"bits): {extra:,} samples beyond the first of their group{across}",
        "bad" if groups else "good",
    )
    at = [""] * len(h) if h.splits is None else [f" {s}" for s in h.splits]  # captions' split
    rows = []
    for g in groups[:GROUPS_SHOWN]:
        members = [int(i) for i in g.members[:MEMBERS_SHOWN]]
        shown = zip(members, g.distances[:MEMBERS_SHOWN], g.paths[:MEMBERS_SHOWN], strict=True)
        captions = [f"{i}{at[i]} d={int(x)} {str(p).rsplit('/', 1)[-1]}" for i, x, p in shown]
        more = len(g.members) - MEMBERS_SHOWN
        splits = h.splits_of(g.members)
        cross = f" <span class='bad'>across splits {esc(', '.join(splits))}</span>"
        rows.append(
            f"<h3>group of {len(g.members)}{f' (+{more} more)' if more > 0 else ''}"
            + (cross if len(splits) > 1 else "")
            + "</h3>"
            + grid(_thumbs(st, members, captions))
        )
    if len(groups) > GROUPS_SHOWN:
        rows.append(para(f"... and {len(groups) - GROUPS_SHOWN:,} more groups", "note"))
    return Section("dupes", "Near-duplicates", head + "".join(rows), wide=True)


def leakage_section(st: Stored, other: Path, compute: bool) -> Section:
    """The samples of `other` (val) with a near twin in `root` (train), PASS or FAIL."""
    root = st.root
    train, why = _hashes(root, compute)
    val, why_other = _hashes(other, compute)
    if train is None or val is None:
        return Section("leakage", "Train/val leakage", para(why or why_other, "note"))
    pairs = sorted(leakage(train, val, DEFAULT_DISTANCE), key=lambda p: (p[2], p[1]))
    n_val = len(val.phash)
    leaked = len({int(v) for _, v, _ in pairs})
    share = leaked / max(1, n_val)
    verdict = "FAIL" if share > LEAK_LIMIT else "PASS"
    head = para(
        f"{verdict}: {leaked:,} of {n_val:,} samples of {other} ({share:.2%}) have a near twin "
        f"in {root} (Hamming distance <= {DEFAULT_DISTANCE}); {len(pairs):,} pairs",
        "bad" if verdict == "FAIL" else "good",
    )
    shown = pairs[:PAIRS_SHOWN]
    left = _thumbs(st, [int(t) for t, _, _ in shown], [f"train {t}" for t, _, _ in shown])
    right = _thumbs(
        Stored(other), [int(v) for _, v, _ in shown], [f"val {v} d={x}" for _, v, x in shown]
    )
    rows = [grid([a, b]) for a, b in zip(left, right, strict=True)]
    listing = table(
        ["train", "train path", "val", "val path", "distance"],
        [(t, train.paths[t], v, val.paths[v], x) for t, v, x in pairs[: PAIRS_SHOWN * 4]],
    )
    body = head + '<div class="grid">' + "".join(rows) + "</div>" + listing
    return Section("leakage", "Train/val leakage", body, wide=True)
