"""The run folder beside OUT: OUT.partial/, with `.prep-run/plan.json` (config and inputs) and
`.prep-run/NNNNN.json`, a finished shard's record, written once its files have their final names:
a killed run leaves whole files, temp files (`.*.tmp`) and records of whole shards, which
`--resume` reuses."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import declared
from loaders.format import MANIFEST, REJECTS, ArraySpec, Manifest, Shard, sha256_file
from loaders.format.index import DIGESTS, SHARDS, index_arrays, index_entry
from prep.run.errors import PrepError, write_error
from prep.run.files import atomic_write_bytes, atomic_write_text, in_threads

RUN_DIR = ".prep-run"  # inside OUT.partial: the plan and one record per finished shard
PLAN = "plan.json"
OLD = ".prep-old"  # inside the new OUT while the old one is removed (where exchange is not had)


def staging_dir(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def _jsonl(record: dict[str, Any]) -> str:
    """One line of rejects.jsonl: UTF-8, or \\u-escaped where a name is not valid UTF-8."""
    line = json.dumps(record, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(record)
    return line + "\n"


def write_rejects(staging: Path, rejects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Write rejects.jsonl sorted by path (whatever order shards finished in); the records."""
    ordered = sorted(rejects, key=lambda r: str(r["path"]))
    text = "".join(_jsonl(r) for r in ordered)
    atomic_write_text(staging / REJECTS, text, fsync_folder=False)  # guard.synced
    return ordered


def write_record(staging: Path, index: int, record: dict[str, Any]) -> None:
    """Not fsynced, nor the plan: after a power loss a record lost or cut short is a shard
    redone (load_record checks its files' sizes and sha256), a plan one a run started again."""
    path = staging / RUN_DIR / f"{index:05d}.json"
    atomic_write_text(path, json.dumps(record), fsync=False, fsync_folder=False)


def load_record(staging: Path, index: int, verify: bool) -> dict[str, Any] | None:
    """The record of a finished shard whose files are all present and intact, else None."""
    path = staging / RUN_DIR / f"{index:05d}.json"
    try:
        record = json.loads(path.read_text())
        for rel, info in record["shard"]["files"].items():
            f = staging / rel
            if not f.is_file() or f.stat().st_size != info["bytes"]:
                return None
            if verify and sha256_file(f) != info["sha256"]:
                return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # absent or unreadable: the shard is redone
    return record


def named_by_rule(shard: dict[str, Any], arrays: dict[str, ArraySpec], storage: str) -> bool:
    """Whether a shard record holds `arrays` in the files the shard index derives (else
    --resume redoes it)."""
    try:
        record = Shard.from_dict(shard)
        index_arrays([record], arrays, storage, [record.split] if record.split else [])
    except (ValueError, KeyError, TypeError):
        return False
    return True


def _changed(before: dict[str, Any], plan: dict[str, Any]) -> str:
    """What differs between two plans, in words."""
    old, new = before.get("config", {}), plan.get("config", {})
    keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if keys:
        shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys)
        return f"the config changed ({shown})"
    counts = before.get("count"), plan.get("count")
    if None not in counts and counts[0] != counts[1]:
        return f"the input files changed ({counts[0]} then, {counts[1]} now)"
    return "the input files changed (names, sizes or modification times)"


def prepare_staging(out: Path, plan: dict[str, Any], overwrite: bool, resume: bool) -> Path:
    """Create OUT.partial, or reuse it for --resume of the same plan (OUT's lock held)."""
    staging = staging_dir(out)
    try:
        if staging.exists():
            before = _read_json(staging / RUN_DIR / PLAN)
            if resume and before is not None:
                if before != plan:
                    raise PrepError(
                        f"cannot resume {staging}: {_changed(before, plan)} since it was "
                        "started. HINT: rerun with the same options and inputs, or pass "
                        "--overwrite to start again"
                    )
                cleanup_temps(staging)  # left by the killed run
                return staging
            if not (resume or overwrite) and not _nothing_finished(staging):
                raise PrepError(
                    f"{staging} holds an unfinished run with finished shards. HINT: --resume "
                    "to finish it, --overwrite to start again"
                )
            if not (resume or overwrite):  # a failed run that kept nothing: nothing to lose
                print(
                    f"note: {staging} held a failed run that packed nothing: starting again",
                    file=sys.stderr,
                )
            if not (staging / RUN_DIR).is_dir() and not (staging / MANIFEST).is_file():
                raise PrepError(
                    f"{staging} is in the way and is not a prep run folder. HINT: move it away"
                )
            remove(staging)
        (staging / RUN_DIR).mkdir(parents=True)
        text = json.dumps(plan, sort_keys=True)
        atomic_write_text(staging / RUN_DIR / PLAN, text, fsync=False, fsync_folder=False)
    except OSError as e:
        raise write_error(e, str(staging)) from e
    return staging


def _nothing_finished(staging: Path) -> bool:
    """Whether `staging` is a prep run folder whose finished shards hold no sample."""
    run = staging / RUN_DIR
    for path in run.glob("[0-9]*.json") if run.is_dir() else []:
        try:
            record = json.loads(path.read_text())
            shards = record.get("splits", [record["shard"]])  # a shard per split, or one
            if sum(int(s.get("count", 1)) for s in shards):
                return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False  # unreadable: it may hold samples
    return run.is_dir()


def cleanup_temps(staging: Path) -> None:
    """Remove the temp files of unfinished writes (this run's, or a killed run's)."""
    for folder in (staging, staging / RUN_DIR):
        for p in folder.glob(".*.tmp"):
            p.unlink(missing_ok=True)


def finished(out: Path, plan: dict[str, Any]) -> bool:
    """Whether OUT is complete with `plan` and no run is pending (killed after the swap)."""
    manifest = None if staging_dir(out).exists() else _read_json(out / MANIFEST)
    if manifest is None:
        return False
    extra = manifest.get("extra")
    recorded = extra.get("inputs") if isinstance(extra, dict) else None
    before = {"config": manifest.get("config") or {}, "inputs": recorded or plan.get("inputs")}
    if before["config"] != plan.get("config") or before["inputs"] != plan.get("inputs"):
        raise PrepError(
            f"cannot resume {out}: it is complete, and {_changed(before, plan)} since it was "
            "packed. HINT: pass --overwrite to pack it again"
        )
    return True


def _read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`; None where there is none."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def listed_files(m: Manifest, index: bool = True) -> dict[str, str]:
    """Name -> sha256 of each file `m` lists: shards', the index's (with `index`), fields'."""
    files = {n: f.sha256 for s in m.shards for n, f in s.files.items()}
    if index:
        files |= {n: str(f["sha256"]) for n, f in (m.index or {}).get("files", {}).items()}
    for name, field in declared(m).items():
        files |= {f: str(sha) for f, sha in field.files(name).items()}
    return files


def remove(path: Path) -> None:
    """A file, or a folder and all it holds: a folder's files unlinked many at a time first."""
    if path.is_dir() and not path.is_symlink():
        unlink_files(path)
        shutil.rmtree(path)  # what is left: sub-folders, and a file that would not go
    else:
        path.unlink()


UNLINKERS = 16  # threads: an unlink that frees a file's blocks waits on the disk, and they overlap


def unlink_files(folder: Path) -> None:
    """Unlink the files (and links) `folder` holds, UNLINKERS at a time; an error leaves the
    file for shutil.rmtree to name. By name in the folder opened once, never through a link:
    a folder swapped for a link meanwhile is not followed (as shutil.rmtree does). On ext4
    mounted with discard one unlink of a shard takes ~3 ms: 130 shard files one by one ~450 ms,
    at 16 a time ~35 ms."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as entries:
            names = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]

        def unlink(some: Sequence[str]) -> None:
            for name in some:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)

        in_threads(unlink, names, min(UNLINKERS, len(names) // 4))  # a few: no thread is worth it
    finally:
        os.close(fd)


def write_manifest(staging: Path, m: Manifest) -> None:
    """The dataset's shard index, then its manifest (holding the index's sizes and digests)."""
    table, digests = index_arrays(m.shards, m.arrays, m.storage, m.splits)
    files = {}
    for name, arr in ((SHARDS, table), (DIGESTS, digests)):
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        data = buf.getvalue()
        atomic_write_bytes(staging / name, data, fsync=False, fsync_folder=False)
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    m.index = index_entry(table, m.arrays, m.storage, files)
    atomic_write_text(staging / MANIFEST, m.to_json(), fsync_folder=False)  # guard.synced
