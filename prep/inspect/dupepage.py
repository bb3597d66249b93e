"""prep report's near-duplicate groups (thumbnail rows with their Hamming distances) and the
train/val leakage list (`--against OTHER`: the samples of OTHER with a near twin in ROOT), from
the hashes of prep.inspect.dupes."""

from __future__ import annotations

from pathlib import Path

from prep.inspect import gallery
from prep.inspect.dupes import DEFAULT_DISTANCE, Hashes, dataset_hashes, dupe_groups, leakage
from prep.inspect.html import Section, esc, grid, para, table
from prep.inspect.stored import Stored
from prep.run.errors import PrepError

GROUPS_SHOWN = 16  # groups drawn (largest first); the rest counted
MEMBERS_SHOWN = 8  # thumbnails a group row
PAIRS_SHOWN = 32  # leaking pairs drawn; the rest listed in the count
LEAK_LIMIT = 0.001  # a val share with a train twin above this fails the check (Deepchecks' style)


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
    return [t for one in gallery.thumbs(st, picture, indices, captions) for t in one]


def dupes(st: Stored, compute: bool) -> Section:
    """The near-duplicate groups within the dataset, largest first, as thumbnail rows; a group
    whose samples lie in more than one split is marked (a leak between them)."""
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
    rows = []
    for g in groups[:GROUPS_SHOWN]:
        members = [int(i) for i in g.members[:MEMBERS_SHOWN]]
        shown = zip(members, g.distances[:MEMBERS_SHOWN], g.paths[:MEMBERS_SHOWN], strict=True)
        captions = [
            f"{i}{h.split_at(i)} d={int(x)} {str(p).rsplit('/', 1)[-1]}" for i, x, p in shown
        ]
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


def leaks(st: Stored, other: Path, compute: bool) -> Section:
    """The samples of `other` (val) with a near twin in `root` (train): count, share, a PASS
    or FAIL line, and the first pairs side by side."""
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
