"""prep report's near-duplicate groups (thumbnail rows with their Hamming distances) and the
train/val leakage list (`--against OTHER`: the samples of OTHER with a near twin in ROOT), from
the perceptual hashes prep stores with an image field (prep.inspect.dupes; `--hash` computes them
from the stored pixels of a dataset without them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prep.inspect import gallery
from prep.inspect.html import Section, esc, grid, para, table
from prep.inspect.stored import Stored
from prep.run.errors import PrepError

GROUPS_SHOWN = 16  # groups drawn (largest first); the rest counted
MEMBERS_SHOWN = 8  # thumbnails a group row
PAIRS_SHOWN = 32  # leaking pairs drawn; the rest listed in the count
LEAK_LIMIT = 0.001  # a val share with a train twin above this fails the check (Deepchecks' style)


def _hashes(root: Path, compute: bool) -> tuple[Any, str]:
    """The dataset's hashes, or None and why not (an older dataset without --hash)."""
    from prep.inspect.dupes import dataset_hashes

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


def dupes(st: Stored, compute: bool, distance: int | None = None) -> Section:
    """The near-duplicate groups within the dataset, largest first, as thumbnail rows; a group
    whose samples lie in more than one split is marked (a leak between them)."""
    from prep.inspect.dupes import DEFAULT_DISTANCE, dupe_groups

    h, why = _hashes(st.root, compute)
    if h is None:
        return Section("dupes", "Near-duplicates", para(why, "note"))
    d = DEFAULT_DISTANCE if distance is None else distance
    groups = sorted(dupe_groups(h, d), key=lambda g: -len(g.members))
    extra = sum(len(g.members) - 1 for g in groups)
    crossing = [g for g in groups if len(h.splits_of(g.members)) > 1]
    across = f"; {len(crossing):,} cross splits" if crossing else ""
    head = para(
        f"{len(groups):,} groups of near-duplicates (Hamming distance <= {d} of 64 bits): "
        f"{extra:,} samples beyond the first of their group{across}",
        "bad" if groups else "good",
    )
    rows = []
    for g in groups[:GROUPS_SHOWN]:
        members = [int(i) for i in g.members[:MEMBERS_SHOWN]]
        dist = [int(x) for x in g.distances[:MEMBERS_SHOWN]]
        paths = [str(p) for p in g.paths[:MEMBERS_SHOWN]]
        captions = [
            f"{i}{h.split_at(i)} d={x} {p.rsplit('/', 1)[-1]}"
            for i, x, p in zip(members, dist, paths, strict=True)
        ]
        more = (
            f" (+{len(g.members) - MEMBERS_SHOWN} more)" if len(g.members) > MEMBERS_SHOWN else ""
        )
        splits = h.splits_of(g.members)
        cross = f", across splits {', '.join(splits)}" if len(splits) > 1 else ""
        rows.append(
            f"<h3>group of {len(g.members)}{esc(more)}"
            + (f" <span class='bad'>{esc(cross[2:])}</span>" if cross else "")
            + "</h3>"
            + grid(_thumbs(st, members, captions))
        )
    if len(groups) > GROUPS_SHOWN:
        rows.append(para(f"... and {len(groups) - GROUPS_SHOWN:,} more groups", "note"))
    return Section("dupes", "Near-duplicates", head + "".join(rows), wide=True)


def leakage(st: Stored, other: Path, compute: bool, distance: int | None = None) -> Section:
    """The samples of `other` (val) with a near twin in `root` (train): count, share, a PASS
    or FAIL line, and the first pairs side by side."""
    from prep.inspect.dupes import DEFAULT_DISTANCE
    from prep.inspect.dupes import leakage as find

    root = st.root
    train, why = _hashes(root, compute)
    val, why_other = _hashes(other, compute)
    if train is None or val is None:
        return Section("leakage", "Train/val leakage", para(why or why_other, "note"))
    d = DEFAULT_DISTANCE if distance is None else distance
    pairs = sorted(find(train, val, d), key=lambda p: (p[2], p[1]))
    n_val = len(val.phash)
    leaked = len({int(v) for _, v, _ in pairs})
    share = leaked / max(1, n_val)
    verdict = "FAIL" if share > LEAK_LIMIT else "PASS"
    head = para(
        f"{verdict}: {leaked:,} of {n_val:,} samples of {other} ({share:.2%}) have a near twin "
        f"in {root} (Hamming distance <= {d}); {len(pairs):,} pairs",
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
