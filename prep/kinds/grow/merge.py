"""`prep merge A B ... OUT`: datasets with the same fields become one, without decoding: their
shards are hard-linked (copied across file systems) under the merged numbering; only two kinds
of arrays are rewritten, both cheap: the label arrays of a dataset whose class ids move when
the class maps are unified, and `source`, each path prefixed with its dataset's name."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import (
    MANIFEST,
    OFFSETS,
    REJECTS,
    ArraySpec,
    FileInfo,
    FormatError,
    Manifest,
    Shard,
    local_resolver,
    sha256_file,
)
from loaders.format.arrays import read_manifest_file
from loaders.format.index import file_name, parts, shard_of, stem
from loaders.format.spec import smallest_uint
from prep.run import staging as st
from prep.run.card import write_card
from prep.run.errors import PrepError, UsageError, write_error
from prep.run.files import NpyWriter, RaggedWriter, temp_path
from prep.run.grow import STATE, link, write_state
from prep.run.guard import check_out, install, locked, recover
from prep.run.version import __version__

LABELS = ("label", "labels")  # field kinds whose ids index `classes`: remapped
SOURCE = "source"


@dataclass
class Part:
    """One dataset to merge: its folder, manifest, manifest's sha256 and name in `source`."""

    root: Path
    manifest: Manifest
    sha: str
    name: str


@dataclass
class MergeSummary:
    out: Path
    datasets: int
    samples: int
    shards: int
    rewritten: int  # files rewritten (labels remapped, sources prefixed); the rest are links
    seconds: float

    def line(self) -> str:
        return (
            f"{self.out}: {self.datasets} datasets merged, {self.samples} samples in "
            f"{self.shards} shards ({self.rewritten} files rewritten, the rest linked), "
            f"{self.seconds:.1f} s"
        )


def open_part(root: Path) -> Part:
    try:
        data, _ = read_manifest_file(root)
        m = Manifest.from_json(data, root / MANIFEST, local_resolver(root))
    except FormatError as e:
        raise PrepError(f"cannot merge {root}: {e}") from None
    if m.storage != "npy":
        raise PrepError(f"cannot merge {root}: its storage is {m.storage}. HINT: pack it as npy")
    return Part(root, m, hashlib.sha256(data).hexdigest(), root.name)


def compared(d: dict[str, Any]) -> dict[str, Any]:
    """A field's declaration less what a merge unifies (a label's classes and dtype)."""
    return {
        k: v for k, v in d.items() if d.get("kind") not in LABELS or k not in ("classes", "dtype")
    }


def check_parts(parts_: list[Part]) -> None:
    """Refuse fewer than two datasets, one dataset twice, and fields that differ."""
    if len(parts_) < 2:
        raise UsageError("prep merge needs two datasets or more, then OUT")
    for i, p in enumerate(parts_):
        for q in parts_[:i]:
            if p.root.resolve() == q.root.resolve() or p.sha == q.sha:
                raise PrepError(
                    f"cannot merge {p.root} with itself ({q.root} is the same dataset). "
                    "HINT: name each dataset once"
                )
        if p.name in {q.name for q in parts_[:i]}:
            raise PrepError(
                f"two datasets are named {p.name}: their sources would mix. HINT: rename one folder"
            )
    first = parts_[0]
    for p in parts_[1:]:
        a, b = first.manifest.fields, p.manifest.fields
        for name in sorted(set(a) | set(b)):
            if name not in a or name not in b or compared(a[name]) != compared(b[name]):
                raise PrepError(
                    f"cannot merge {p.root} into {first.root}: field {name} differs "
                    f"({a.get(name)} vs {b.get(name)}). HINT: merge datasets of the same fields"
                )


def unified(parts_: list[Part]) -> dict[str, list[str]]:
    """Each label field's classes: the first dataset's, then each new name in order."""
    out: dict[str, list[str]] = {}
    for p in parts_:
        for name, d in p.manifest.fields.items():
            if d.get("kind") in LABELS and isinstance(d.get("classes"), list):
                have = out.setdefault(name, [])
                have += [c for c in d["classes"] if c not in have]
    return out


def rewrite(src: Path, dst: Path, ragged: bool, fn: Any) -> FileInfo:
    """Array file `src` mapped by `fn` (values -> values) into `dst` (prep's .npy layout)."""
    values = np.load(src, mmap_mode="r")
    new = np.ascontiguousarray(fn(values))
    w = NpyWriter(temp_path(dst), new.dtype, () if ragged else new.shape[1:])
    w.extend(new if new.ndim else new[None])
    w.close()
    os.replace(w.path, dst)
    return FileInfo(dst.stat().st_size, sha256_file(dst))


def prefixed(
    data: Path, offsets: Path, staging: Path, names: tuple[str, str], prefix: bytes
) -> tuple[dict[str, FileInfo], int]:
    """The `source` texts of a shard, each with `prefix`: their files' records and length."""
    raw, off = np.load(data, mmap_mode="r"), np.load(offsets, mmap_mode="r")
    w = RaggedWriter(temp_path(staging / names[0]), temp_path(staging / names[1]), "uint8")
    add = np.frombuffer(prefix, np.uint8)
    for k in range(len(off) - 1):
        w.append(np.concatenate([add, raw[off[k] : off[k + 1]]]))
    w.close()
    infos = {}
    for tmp, name in ((w.data.path, names[0]), (w.offsets.path, names[1])):
        os.replace(tmp, staging / name)
        infos[name] = FileInfo((staging / name).stat().st_size, sha256_file(staging / name))
    return infos, w.length


def merge(sources: list[Path], out: Path, overwrite: bool = False) -> MergeSummary:
    """Merge `sources` into `out` (the run engine's lock, run folder and swap)."""
    start = time.perf_counter()
    out = Path(os.path.abspath(out))
    check_out(out, sources, overwrite, resume=False)
    with locked(out):
        recover(out)
        got = [open_part(Path(s)) for s in sources]
        check_parts(got)
        plan = {"merge": [p.sha for p in got]}
        staging = st.prepare_staging(out, plan, overwrite, resume=False)
        try:
            m, rewritten = _write(got, staging, out)
            write_card(out, staging)
        except OSError as e:
            raise write_error(e, str(staging)) from e
        install(staging, out)
    n = len(m.shards)
    return MergeSummary(out, len(got), m.num_samples, n, rewritten, time.perf_counter() - start)


def _write(got: list[Part], staging: Path, out: Path) -> tuple[Manifest, int]:
    """Every shard under its merged name, the rejects, state and manifest; (manifest, files
    rewritten)."""
    classes = unified(got)
    first = got[0].manifest
    arrays = dict(first.arrays)
    for name, names in classes.items():  # ids of the unified map in the smallest dtype
        arrays[name] = replace(arrays[name], dtype=smallest_uint(max(0, len(names) - 1)))
    shards: list[Shard] = []
    rewritten = 0
    for p in got:
        table = {}  # label field -> its old ids' new ids (None: unchanged, the file linked)
        for name, names in classes.items():
            old = p.manifest.fields[name].get("classes") or []
            ids = np.array([names.index(c) for c in old], dtype=arrays[name].dtype)
            same = np.array_equal(ids, np.arange(len(ids)))
            table[name] = None if same and p.manifest.arrays[name].dtype == ids.dtype else ids
        for i in range(len(p.manifest.shards)):
            shard, n = _shard(p, p.manifest.shards[i], len(shards), arrays, table, staging)
            shards.append(shard)
            rewritten += n
    for p in got:  # a tokenizer and other fields' files travel by name
        for name in st.listed_files(p.manifest, index=False):
            if not any(name == f for s in p.manifest.shards for f in s.files):
                link(p.root / name, staging / name)
    fields = {n: dict(d) for n, d in first.fields.items()}
    for name, names in classes.items():
        fields[name] |= {"classes": names}
        if fields[name].get("dtype") is not None:  # ids without names: the dtype is declared
            fields[name]["dtype"] = arrays[name].dtype
    m = Manifest("npy", arrays, shards, fields, command="merge", tool_version=__version__)
    m.config = {"sources": [p.name for p in got]}
    start = 0
    for p in got:  # samples a dataset hid stay hidden, at their merged indices
        m.removed += [start + r for r in p.manifest.removed]
        start += p.manifest.num_samples
    kept = {k: v for k, v in first.extra.items() if k == "background"}
    merged = [{"dataset": p.name, "version": p.sha, "samples": p.manifest.num_samples} for p in got]
    m.extra = kept | {"merged": merged}
    records = _rejects_and_state(got, staging, m)
    if records and "image" in first.extra.get("stats", {}):  # exact sums: a full pack's stats
        from prep.media.image.geometry import combine

        stats = combine(records)
        if stats is not None:
            m.extra["stats"] = {"image": stats}
    st.write_manifest(staging, m)
    return m, rewritten


def _shard(
    p: Part,
    shard: Shard,
    task: int,
    arrays: dict[str, ArraySpec],
    table: dict[str, np.ndarray | None],
    staging: Path,
) -> tuple[Shard, int]:
    """`shard` of `p` as merged shard `task`: its files linked, or rewritten (labels whose ids
    move, sources prefixed); the merged record and the files rewritten."""
    new_stem, rewritten = stem(shard.split, task), 0
    infos: dict[str, FileInfo] = {}
    lengths = []
    for name in sorted(arrays):
        ref, spec = shard.arrays[name], arrays[name]
        mine = _names(name, new_stem, spec)
        ids = table.get(name)
        length = ref.length
        if ids is not None:
            fn = functools.partial(np.take, ids)
            infos[mine[0]] = rewrite(p.root / ref.file, staging / mine[0], spec.ragged, fn)
            rewritten += 1
            if spec.ragged:
                _link_offsets(p, shard, name, mine, staging, infos)
        elif name == SOURCE and spec.ragged and ref.offsets is not None:
            where = (p.root / ref.file, p.root / ref.offsets.file)
            found, length = prefixed(*where, staging, mine, f"{p.name}/".encode())
            infos |= found
            rewritten += 2
        else:
            _link_all(p, shard, name, mine, staging, infos)
        lengths.append(length)
    files = [infos[n] for n in _ordered(arrays, new_stem)]
    sizes, digests = [f.bytes for f in files], [f.sha256 for f in files]
    record = shard_of(arrays, "npy", shard.split, task, shard.count, lengths, sizes, digests)
    return record, rewritten


def _names(name: str, new_stem: str, spec: ArraySpec) -> tuple[str, str]:
    return file_name(name, new_stem, "npy"), file_name(name + OFFSETS, new_stem, "npy")


def _ordered(arrays: dict[str, ArraySpec], new_stem: str) -> list[str]:
    return [file_name(part, new_stem, "npy") for part in parts(arrays, "npy")]


def _link_all(
    p: Part, shard: Any, name: str, mine: tuple[str, str], staging: Path, infos: dict[str, FileInfo]
) -> None:
    ref = shard.arrays[name]
    link(p.root / ref.file, staging / mine[0])
    infos[mine[0]] = shard.files[ref.file]
    if ref.offsets is not None:
        _link_offsets(p, shard, name, mine, staging, infos)


def _link_offsets(
    p: Part, shard: Any, name: str, mine: tuple[str, str], staging: Path, infos: dict[str, FileInfo]
) -> None:
    off = shard.arrays[name].offsets
    link(p.root / off.file, staging / mine[1])
    infos[mine[1]] = shard.files[off.file]


def _rejects_and_state(got: list[Part], staging: Path, m: Manifest) -> list[dict[str, Any]]:
    """Each dataset's rejects, paths prefixed; its inputs and records, where all kept them
    (the records; none where a dataset kept none)."""
    rejects = []
    for p in got:
        lines = (
            (p.root / REJECTS).read_text(encoding="utf-8").splitlines()
            if (p.root / REJECTS).is_file()
            else []
        )
        rejects += [{**r, "path": f"{p.name}/{r['path']}"} for r in map(json.loads, lines) if r]
    m.rejects = len(st.write_rejects(staging, rejects))
    states = []
    for p in got:
        try:
            states.append(json.loads((p.root / STATE).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return []  # a dataset without one: the merge has none either
    inputs = {
        f"{p.name}/{k}": v for p, s in zip(got, states, strict=True) for k, v in s["inputs"].items()
    }
    records = [r for s in states for r in s["records"]]
    write_state(staging, inputs, records)
    return records
