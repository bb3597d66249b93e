"""`prep compact DATASET`: the many small shards that appends leave, rewritten into shards of
the target size (each split's consecutive shards joined, in order: sample order is kept). The
arrays are joined as they are stored (no decode). The result is a new version whose parent
stays readable (its files kept), unless `--prune` keeps only the new version's files."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import (
    MANIFEST,
    FileInfo,
    FormatError,
    Manifest,
    Shard,
    local_resolver,
    sha256_file,
)
from loaders.format.arrays import read_manifest_file
from loaders.format.index import ShardIndex, file_name, parts, shard_of, stem
from prep.run import staging as st
from prep.run.card import class_counts, kept, write_card
from prep.run.errors import PrepError, write_error
from prep.run.files import NpyWriter, RaggedWriter, temp_path
from prep.run.grow import STATE, Parent, link, link_parent
from prep.run.guard import check_out, install, locked, recover
from prep.run.sharding import shard_size
from prep.run.staging import REJECTS
from prep.run.version import __version__


@dataclass
class CompactSummary:
    out: Path
    before: int  # shards
    after: int
    samples: int
    seconds: float
    reused: int | None = None  # --resume: new shards a killed compact had finished

    def line(self) -> str:
        held = "" if self.reused is None else f", {self.reused} reused"
        return (
            f"{self.out}: {self.before} shards -> {self.after}{held}, {self.samples} samples, "
            f"{self.seconds:.1f} s"
        )


def groups(m: Manifest, size: int) -> list[list[int]]:
    """Consecutive shards of one split joined until they hold `size` samples (or more: a
    shard is never cut)."""
    out: list[list[int]] = []
    held = 0
    splits = m.split_of()
    counts = m.counts()
    for i in range(len(counts)):
        if not out or held >= size or splits[i] != splits[out[-1][0]]:
            out.append([])
            held = 0
        out[-1].append(i)
        held += int(counts[i])
    return out


def read(root: Path, ref: Any, ragged: bool, keep: np.ndarray | None) -> tuple[Any, Any]:
    """An array of a shard as (values, lengths of ragged samples), its removed samples out."""
    values = np.load(root / ref.file, mmap_mode="r")
    if not ragged:
        return (values if keep is None else values[keep]), None
    offsets = np.load(root / ref.offsets.file, mmap_mode="r")
    lengths = np.diff(offsets)
    if keep is None:
        return values, lengths
    pieces = [values[offsets[k] : offsets[k + 1]] for k in np.flatnonzero(keep)]
    empty = values[:0]
    return np.concatenate(pieces) if pieces else empty, lengths[keep]


def join(
    root: Path, m: Manifest, group: list[int], task: int, staging: Path, masks: list[Any]
) -> Shard:
    """Shards `group` of `m` as one shard numbered `task`, each array's samples in order (those
    `masks` keep)."""
    split = m.shards[group[0]].split
    new_stem = stem(split, task)
    infos: dict[str, FileInfo] = {}
    lengths = []
    for name in sorted(m.arrays):
        spec = m.arrays[name]
        data = staging / file_name(name, new_stem, "npy")
        if spec.ragged:
            off_name = file_name(name + ".offsets", new_stem, "npy")
            w: NpyWriter | RaggedWriter = RaggedWriter(
                temp_path(data), temp_path(staging / off_name), spec.dtype
            )
        else:
            w = NpyWriter(temp_path(data), spec.dtype, tuple(spec.shape))
        for i in group:
            values, widths = read(root, m.shards[i].arrays[name], spec.ragged, masks[i])
            if isinstance(w, RaggedWriter):
                w.extend(np.asarray(values), widths)
            else:
                w.extend(np.asarray(values))
        lengths.append(w.length)
        w.close()
        done = (
            [(w.data.path, data), (w.offsets.path, staging / off_name)]
            if isinstance(w, RaggedWriter)
            else [(w.path, data)]
        )
        for tmp, final in done:
            os.replace(tmp, final)
            infos[final.name] = FileInfo(final.stat().st_size, sha256_file(final))
    names = [file_name(p, new_stem, "npy") for p in parts(m.arrays, "npy")]
    sizes, digests = [infos[n].bytes for n in names], [infos[n].sha256 for n in names]
    count = sum(m.shards[i].count if masks[i] is None else int(masks[i].sum()) for i in group)
    return shard_of(m.arrays, "npy", split, task, count, lengths, sizes, digests)


def recounted(root: Path, m: Manifest) -> dict[str, Any]:
    """`extra.splits` (each split's samples and per-class counts) without the removed samples
    a compact drops; {} where nothing changes."""
    said = m.extra.get("splits")
    if not m.removed or not isinstance(said, dict):
        return {}
    per_split = class_counts(root, m, kept(m))
    if not per_split or not all(isinstance(said.get(s), dict) for s in per_split):
        return {}
    return {
        "splits": said
        | {s: said[s] | {"samples": sum(n), "per_class": n} for s, n in per_split.items()}
    }


def compact(
    root: Path, size: int | None = None, prune: bool = False, resume: bool = False
) -> CompactSummary:
    """Rewrite `root` with shards of `size` samples (default: prep's size for its count).
    `resume`: finish a killed compact of the same dataset and options, its joined shards reused
    (each new shard's record is written once its files have their final names, as a pack's)."""
    start = time.perf_counter()
    root = Path(os.path.abspath(root))
    check_out(root, [], overwrite=True, resume=False)
    with locked(root):
        recover(root)  # a compact killed after its swap: finished here
        try:
            data, _ = read_manifest_file(root)
            m = Manifest.from_json(data, root / MANIFEST, local_resolver(root))
        except FormatError as e:
            raise PrepError(f"cannot compact {root}: {e}") from None
        flat = any(s.codec == "flat" for s in m.arrays.values())
        if m.storage != "npy" or flat or not isinstance(m.shards, ShardIndex):
            raise PrepError(
                f"cannot compact {root}: it is not an npy dataset of per-sample arrays with a "
                "shard index. HINT: repack it"
            )
        if resume and not st.staging_dir(root).exists() and m.extra.get("made_by") == "compact":
            n = len(m.shards)  # killed after the swap, or compact already: nothing to do
            return CompactSummary(root, n, n, m.num_samples, time.perf_counter() - start, n)
        sha = hashlib.sha256(data).hexdigest()
        plan = {"config": {"shard_size": size, "prune": prune}, "inputs": sha}
        staging = st.prepare_staging(root, plan, overwrite=not resume, resume=resume)
        try:
            shards, reused = _joined(root, m, sha, staging, shard_size(m.num_samples, size), prune)
            new = Manifest(
                m.storage,
                m.arrays,
                shards,
                m.fields,
                m.config,
                m.rejects,
                m.extra | recounted(root, m) | {"made_by": "compact"},
                __version__,
                command=m.command,
                parent=None if prune else sha,
            )
            st.write_manifest(staging, new)
            write_card(root, staging)
        except OSError as e:
            raise write_error(e, str(staging)) from e
        install(staging, root)
    took = time.perf_counter() - start
    summary = CompactSummary(root, len(m.shards), len(shards), new.num_samples, took)
    summary.reused = reused if resume else None
    return summary


def _joined(
    root: Path, m: Manifest, sha: str, staging: Path, target: int, prune: bool
) -> tuple[list[Shard], int]:
    """The new shards in the run folder (those a killed run finished reused), the files the
    new version keeps beside them linked; (shards, how many were reused)."""
    if not prune:  # the parent version stays readable: its files, linked
        link_parent(root, staging, Parent(m, sha, {}, []))
    # new file names after the kept version's (pruned: nothing kept, from 0)
    assert isinstance(m.shards, ShardIndex)  # compact refuses a manifest of inline shards
    first = 0 if prune or not len(m.shards) else int(m.shards.table[2].max()) + 1
    masks = kept(m)  # removed samples are dropped here
    shards, reused = [], 0
    for k, group in enumerate(groups(m, target)):
        record = st.load_record(staging, first + k, verify=True)
        if record is not None:
            shards.append(Shard.from_dict(record["shard"]))
            reused += 1
            continue
        shard = join(root, m, group, first + k, staging, masks)
        st.write_record(staging, first + k, {"index": first + k, "shard": asdict(shard)})
        shards.append(shard)
    for name in (STATE, REJECTS):
        if (root / name).is_file():
            link(root / name, staging / name)
    for name in st.listed_files(m, index=False):  # a tokenizer: a field's own file
        if not any(name in s.files for s in m.shards) and not (staging / name).exists():
            link(root / name, staging / name)
    return shards, reused
