"""The run folder every writing command shares: OUT.partial/, its plan, shard records, the swap.

A command builds OUT.partial/ beside OUT. `.prep-run/plan.json` holds what the output depends on
(config and inputs); each finished shard leaves `.prep-run/NNNNN.json` (its files, sizes, sha256,
rejects), written after its files were renamed to their final names. `--resume` reuses every shard
whose record and files check out; `install` swaps the finished folder into place, last.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from loaders.format import atomic_write_text, sha256_file
from prep import PrepError

RUN_DIR = ".prep-run"  # inside OUT.partial: the plan and one record per finished shard
PLAN = "plan.json"


def write_record(staging: Path, index: int, record: dict[str, Any]) -> None:
    atomic_write_text(staging / RUN_DIR / f"{index:05d}.json", json.dumps(record))


def staging_dir(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def load_record(staging: Path, index: int, verify: bool) -> dict[str, Any] | None:
    """The record of a finished shard whose files are all present and intact, else None."""
    path = staging / RUN_DIR / f"{index:05d}.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for rel, info in record["shard"]["files"].items():
        f = staging / rel
        if not f.is_file() or f.stat().st_size != info["bytes"]:
            return None
        if verify and sha256_file(f) != info["sha256"]:
            return None
    return record


def prepare_staging(out: Path, plan: dict[str, Any], overwrite: bool, resume: bool) -> Path:
    """Create OUT.partial, or reuse it for --resume when it was started with the same plan."""
    staging = staging_dir(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise PrepError(
            f"{out} already exists and is not empty. HINT: pass --overwrite to replace "
            "it (the old dataset stays readable until the new one is complete)"
        )
    if staging.exists():
        old = staging / RUN_DIR / PLAN
        if resume and old.is_file():
            before = json.loads(old.read_text())
            if before != plan:
                diff = [
                    k
                    for k in sorted(set(before["config"]) | set(plan["config"]))
                    if before["config"].get(k) != plan["config"].get(k)
                ]
                what = f"config keys {diff}" if diff else "the input files"
                raise PrepError(
                    f"cannot resume {staging}: {what} changed since it was started. "
                    "HINT: rerun with the same options and inputs, or --overwrite"
                )
            return staging
        if not (resume or overwrite):
            raise PrepError(
                f"{staging} holds an unfinished run. HINT: --resume to finish it, "
                "--overwrite to start again"
            )
        shutil.rmtree(staging)
    (staging / RUN_DIR).mkdir(parents=True)
    atomic_write_text(staging / RUN_DIR / PLAN, json.dumps(plan, sort_keys=True))
    return staging


def cleanup_temps(staging: Path) -> None:
    for p in staging.glob(".*.tmp"):
        p.unlink(missing_ok=True)


def install(staging: Path, out: Path) -> None:
    """Swap the finished dataset into place; an old OUT is removed only after the swap."""
    shutil.rmtree(staging / RUN_DIR)
    old = None
    if out.exists():
        old = out.with_name(f"{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old) if old.is_dir() else old.unlink()
