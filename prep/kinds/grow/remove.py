"""`prep remove DATASET --ids FILE`: samples hidden by a tombstone list in the manifest
(`removed`, sample indices over all shards) until `prep compact` drops them. Nothing is
rewritten: the new version lists the same shards; the one before stays readable."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from loaders.fields.base import decode_source
from loaders.format import MANIFEST, FormatError, Manifest, local_resolver
from loaders.format.arrays import read_manifest_file
from loaders.format.index import ShardIndex
from prep.run import staging as st
from prep.run.card import write_card
from prep.run.errors import PrepError, write_error
from prep.run.grow import STATE, Parent, link, link_parent
from prep.run.guard import check_out, install, locked, recover
from prep.run.version import __version__

# Datasets whose readers map indices through the generic shard lookup (tokens, tables and
# volumes count windows, rows or cases their own way)
REMOVABLE = ("pack", "samples", "merge")


@dataclass
class RemoveSummary:
    out: Path
    removed: int  # by this run
    hidden: int  # in all
    samples: int  # read now

    def line(self) -> str:
        return (
            f"{self.out}: {self.removed} samples removed ({self.hidden} hidden in all, "
            f"{self.samples} read); `prep compact` drops their bytes"
        )


def open_dataset(root: Path) -> tuple[Manifest, str]:
    try:
        data, _ = read_manifest_file(root)
        m = Manifest.from_json(data, root / MANIFEST, local_resolver(root))
    except FormatError as e:
        raise PrepError(f"cannot change {root}: {e}") from None
    if not isinstance(m.shards, ShardIndex):
        raise PrepError(f"cannot change {root}: it lists its shards inline. HINT: repack it")
    return m, hashlib.sha256(data).hexdigest()


def sources(root: Path, m: Manifest) -> dict[str, list[int]]:
    """Each `source` -> the indices of its samples (over all shards)."""
    out: dict[str, list[int]] = {}
    start = 0
    for i in range(len(m.shards)):
        ref = m.shards[i].arrays["source"]
        assert ref.offsets is not None
        data = np.load(root / ref.file, mmap_mode="r")
        off = np.load(root / ref.offsets.file, mmap_mode="r")
        for k in range(len(off) - 1):
            out.setdefault(decode_source(data[off[k] : off[k + 1]]), []).append(start + k)
        start += m.shards[i].count
    return out


def chosen(root: Path, m: Manifest, ids: Path) -> set[int]:
    """The samples FILE names: a line an index, or a `source` path."""
    try:
        lines = [line.strip() for line in ids.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as e:
        raise PrepError(f"--ids {ids}: cannot read it ({e})") from None
    by_source = None
    out: set[int] = set()
    for n, line in enumerate(lines, 1):
        if not line:
            continue
        if line.isdigit() and int(line) < m.num_samples:
            out.add(int(line))
            continue
        if by_source is None:  # read once, where a line is no index
            by_source = sources(root, m) if "source" in m.arrays else {}
        if line not in by_source:
            raise PrepError(
                f"--ids {ids} line {n}: {line!r} is no sample of {root} (an index below "
                f"{m.num_samples}, or a source path). HINT: fix the line; nothing was removed"
            )
        out.update(by_source[line])
    return out


def remove(root: Path, ids: Path) -> RemoveSummary:
    """Hide the samples `ids` names, as a new version of `root`."""
    root = Path(os.path.abspath(root))
    check_out(root, [], overwrite=True, resume=False)
    with locked(root):
        recover(root)
        m, sha = open_dataset(root)
        if m.command not in REMOVABLE:
            raise PrepError(f"cannot remove samples of a prep {m.command} dataset (yet)")
        new = chosen(root, m, ids) - set(m.removed)
        removed = sorted(set(m.removed) | new)
        staging = st.prepare_staging(root, {"remove": sha, "ids": removed}, True, False)
        try:
            link_parent(root, staging, Parent(m, sha, {}, []))
            for name in (STATE, st.REJECTS):
                if (root / name).is_file():
                    link(root / name, staging / name)
            grown = replace(m, shards=list(m.shards), parent=sha, removed=removed)
            grown.extra = m.extra | {"made_by": "remove"}
            grown.tool_version = __version__
            st.write_manifest(staging, grown)
            write_card(root, staging)  # counts without the removed samples
        except OSError as e:
            raise write_error(e, str(staging)) from e
        install(staging, root)
    return RemoveSummary(root, len(new), len(removed), m.num_samples - len(removed))
