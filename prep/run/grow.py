"""`--append`: a new version of a dataset made from only its new inputs. The run folder holds
hard links of the parent's shards (copies where links cannot be made) beside the new shards,
and `versions/SHA/` the parent's manifest and shard index, so that the swap installs old and
new at once and a reader of the parent keeps reading it (loaders.read.store)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import MANIFEST, REJECTS, FormatError, Manifest, local_resolver
from loaders.format.arrays import read_manifest_file
from loaders.format.index import DIGESTS, SHARDS, ShardIndex
from loaders.format.schema import VERSIONS
from prep.run.errors import PrepError, UsageError
from prep.run.files import atomic_write_text
from prep.run.staging import listed_files


def remote_out(out: object) -> bool:
    """OUT names a URL (s3://b/ds): loaders.remote, which imports the network modules, is
    imported only where OUT has the ":" of a scheme (a local run does without: issue 40)."""
    if ":" not in str(out):
        return False
    from loaders.remote import url_of

    return url_of(str(out)) is not None


STATE = "inputs.json"  # what later appends need: each input's identity, each shard's stats
KEPT = ("src", "out", "limit")  # config keys an append may change: where the new inputs are
# A table column's keys an append recomputes from all the rows: its statistics
RECOUNTED = ("missing", "lo", "hi", "mean", "std", "counts")


@dataclass
class Parent:
    """The dataset an append grows: its manifest, that manifest's sha256, its recorded state."""

    manifest: Manifest
    sha: str
    inputs: dict[str, str]  # input name -> identity (Kind.identities)
    records: list[dict[str, Any]]  # each shard's split, count and stats, in manifest order
    rejects: list[dict[str, Any]] = field(default_factory=list)

    @property
    def first_task(self) -> int:
        """The task number of the first new shard: after every task number the parent used."""
        shards = self.manifest.shards
        assert isinstance(shards, ShardIndex)  # open_parent refuses inline shards
        return int(shards.table[2].max()) + 1 if len(shards) else 0


def refused(out: Path, why: str, hint: str) -> PrepError:
    return PrepError(f"cannot append to {out}: {why}. HINT: {hint}")


def open_parent(out: Path, command: str, cfg: Any) -> Parent:
    """OUT's dataset, refused unless prep wrote it with `command` and recorded its inputs;
    `cfg`'s options left at their defaults take the dataset's (adopt_config)."""
    if not (out / MANIFEST).is_file():
        raise refused(out, "it holds no dataset", "pack it first, without --append")
    try:
        data, _ = read_manifest_file(out)
        m = Manifest.from_json(data, out / MANIFEST, local_resolver(out))
    except FormatError as e:
        raise refused(out, f"it is not a dataset prep can read ({e})", "repack it") from None
    if m.command != command:
        raise refused(
            out,
            f"it was written by prep {m.command or '?'}, not prep {command}",
            f"append with prep {m.command}, or write a new dataset",
        )
    if not isinstance(m.shards, ShardIndex):
        raise refused(out, "its manifest lists shards inline (an older format)", "repack it")
    try:
        state = json.loads((out / STATE).read_text(encoding="utf-8"))
        inputs, records = dict(state["inputs"]), list(state["records"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise refused(
            out,
            f"its {STATE} (the inputs it holds) is missing or unreadable ({e})",
            "repack it once with --overwrite: datasets packed since keep it",
        ) from None
    try:
        lines = (out / REJECTS).read_text(encoding="utf-8").splitlines()
        rejects = [json.loads(line) for line in lines if line]
    except (OSError, ValueError) as e:
        raise refused(out, f"its {REJECTS} cannot be read ({e})", "repack it") from None
    adopt_config(cfg, m.config)
    return Parent(m, hashlib.sha256(data).hexdigest(), inputs, records, rejects)


def adopt_config(cfg: Any, old: Mapping[str, Any]) -> None:
    """Options left at their defaults take the dataset's; one that differs is refused."""
    defaults = {
        f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        for f in dataclasses.fields(cfg)
    }
    for key, was in old.items():
        if key in KEPT or key not in defaults:
            continue
        now = getattr(cfg, key)
        if now == was:
            continue
        if now == defaults[key]:
            setattr(cfg, key, was)
            continue
        raise PrepError(
            f"cannot append: {key} {now!r} differs from the dataset's {was!r}. HINT: leave the "
            f"option out to take the dataset's, or write a new dataset"
        )


def grown_classes(old: list[str], new: list[str]) -> list[str]:
    """The class map after an append: old ids never change, a new class gets the next id.

    >>> grown_classes(["cat", "dog"], ["ant", "dog"])
    ['cat', 'dog', 'ant']
    """
    return old + [c for c in new if c not in old]


def file_identity(
    path: Path | str,
    label: int | None = None,
    classes: Any = None,
    *said: Any,
    st: os.stat_result | None = None,
) -> str:
    """What makes a file input the same one: its size and time (`st`: its stat, taken already),
    its label's name (ids move when a class is added) and what else is `said`.

    >>> file_identity("/no/such/file", 1, ["cat", "dog"])
    '[null, "dog"]'
    """
    try:
        st = Path(path).stat() if st is None else st
        stamp: str | None = f"{st.st_size}:{st.st_mtime_ns}"
    except (OSError, ValueError):  # gone: decoding rejects it
        stamp = None
    name = classes[label] if classes and label is not None else label
    return json.dumps([stamp, name, *said])


def check_fields(old: Manifest, fields: Mapping[str, Any], arrays: Mapping[str, Any]) -> None:
    """Refuse new fields unlike the dataset's, naming the first difference; a label's class
    list may only grow at its end."""
    said = json.loads(json.dumps(dict(fields)))  # as the manifest holds it: lists, not tuples
    for name in sorted(set(old.fields) | set(said)):
        a, b = dict(old.fields.get(name) or {}), dict(said.get(name) or {})
        if not a or not b:
            what = "is new" if not a else "is missing"
            raise PrepError(f"cannot append: field {name} {what}. HINT: write a new dataset")
        for key in RECOUNTED if a.get("kind") == "column" else ():
            a.pop(key, None), b.pop(key, None)
        for key in ("classes", "vocab"):  # old ids never change
            ca, cb = a.pop(key, None), b.pop(key, None)
            if isinstance(ca, list) and (not isinstance(cb, list) or cb[: len(ca)] != ca):
                raise PrepError(
                    f"cannot append: field {name}'s {key} {cb} do not start with the dataset's "
                    f"{ca} (old ids would change). HINT: list new classes after the old ones"
                )
        keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        if keys:
            k = keys[0]
            raise PrepError(
                f"cannot append: field {name} has {k} {b.get(k)!r}, the dataset's is "
                f"{a.get(k)!r}. HINT: pack with the dataset's settings, or write a new dataset"
            )
    for name, spec in arrays.items():
        was = old.arrays.get(name)
        if was is not None and was.stored() != spec.stored():
            raise PrepError(
                f"cannot append: array {name} would be {spec.stored()}, the dataset's is "
                f"{was.stored()}. HINT: write a new dataset"
            )


def fresh(parent: Parent, identities: Mapping[str, str]) -> set[str]:
    """The names of inputs the dataset does not hold (by name and identity)."""
    return {rel for rel, ident in identities.items() if parent.inputs.get(rel) != ident}


def link(src: Path, dst: Path) -> None:
    """`dst` the same file as `src`: a hard link, else a copy (another file system)."""
    if dst.exists():
        return  # linked by the run this one resumes
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_parent(out: Path, staging: Path, parent: Parent) -> None:
    """The parent's files into the run folder, and its manifest and index as a kept version."""
    for name in listed_files(parent.manifest, index=False):
        link(out / name, staging / name)
    versions = out / VERSIONS
    for kept in sorted(versions.iterdir()) if versions.is_dir() else []:
        for f in kept.iterdir():
            link(f, staging / VERSIONS / kept.name / f.name)
    for name in (MANIFEST, SHARDS, DIGESTS):
        link(out / name, staging / VERSIONS / parent.sha / name)


def trimmed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What later appends keep of shard records: split, count and stats (not their files)."""
    out = []
    for r in records:
        for s in r.get("splits", [r["shard"]]):
            kept: dict[str, Any] = {"shard": {"split": s.get("split"), "count": s["count"]}}
            for key in ("stats", "quality"):  # what the manifest's extra sums over all shards
                if r.get(key) is not None:
                    kept[key] = r[key]
            out.append(kept)
    return out


def write_state(staging: Path, inputs: Mapping[str, str], records: list[dict[str, Any]]) -> None:
    state = {"inputs": dict(sorted(inputs.items())), "records": records}
    text = json.dumps(state, sort_keys=True) + "\n"
    atomic_write_text(staging / STATE, text, fsync=False, fsync_folder=False)  # guard.synced


def unique_rejects(rejects: list[dict[str, Any]], parent: Parent | None) -> list[dict[str, Any]]:
    """The parent's rejects and this run's, less those the parent already lists (an unreadable
    input listed again by the append)."""
    if parent is None:
        return rejects
    seen = {(str(r["path"]), str(r["reason"])) for r in parent.rejects}
    return parent.rejects + [r for r in rejects if (str(r["path"]), str(r["reason"])) not in seen]


def counts_added(old: Any, new: Any) -> Any:
    """`extra.splits`-like counts summed: numbers added, lists added elementwise (padded).

    >>> counts_added({"train": {"samples": 3, "per_class": [1, 2]}},
    ...              {"train": {"samples": 2, "per_class": [0, 1, 1]}})
    {'train': {'samples': 5, 'per_class': [1, 3, 1]}}
    """
    if isinstance(old, dict) and isinstance(new, dict):
        return {k: counts_added(old.get(k), new.get(k)) for k in dict.fromkeys([*old, *new])}
    if isinstance(old, list) or isinstance(new, list):
        a, b = np.asarray(old or [], np.int64), np.asarray(new or [], np.int64)
        n = max(len(a), len(b))
        return (np.pad(a, (0, n - len(a))) + np.pad(b, (0, n - len(b)))).tolist()
    return (old or 0) + (new or 0)


def adopt_early(cfg: Any) -> None:
    """--append: a command that builds its fields from the options before the run (an
    importer) takes the dataset's for those left at their defaults now; open_parent refuses
    what does not fit later."""
    if not cfg.append or cfg.overwrite or remote_out(cfg.out):
        return
    try:
        data, _ = read_manifest_file(Path(str(cfg.out)))
        old = json.loads(data)["config"]
    except (OSError, FormatError, ValueError, KeyError, TypeError):
        return  # no dataset there: open_parent says so
    if isinstance(old, dict):
        adopt_config(cfg, old)


def check_append(cfg: Any, appendable: bool, command: str) -> None:
    """Refuse --append where it cannot run, before anything is read."""
    if cfg.overwrite:
        raise UsageError("--append and --overwrite: choose one (--overwrite repacks everything)")
    if not appendable:
        raise UsageError(
            f"prep {command} cannot --append yet. HINT: pack the new inputs as a dataset of "
            "their own, or repack everything with --overwrite"
        )
    if cfg.staging is not None or remote_out(cfg.out):
        raise UsageError(
            f"--append writes a local dataset, not {cfg.out}. HINT: append to a local copy, "
            "then upload it"
        )
