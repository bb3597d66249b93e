"""The run driver every writing command uses: list -> plan -> one task per shard -> records ->
manifest last -> install. A data kind supplies `Kind` (prep.run.kind); guards, resuming,
progress, backends and --max-rejects are here, once."""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from loaders.format import REJECTS, Manifest, read_manifest
from prep.run import grow
from prep.run import staging as st
from prep.run.card import write_card
from prep.run.errors import PrepError, write_error
from prep.run.grow import Parent
from prep.run.guard import check_out, install, locked, recover
from prep.run.inputs import named_rejects
from prep.run.kind import Inputs, Kind, array_specs
from prep.run.parallel import check_backend, progress, run_tasks
from prep.run.profile import StageTimer, run_profiled
from prep.run.summary import RunSummary
from prep.run.version import __version__


def run(kind: Kind[Any, Any], show_progress: bool = True, profile: bool = False) -> RunSummary:
    """Write `kind.cfg.out` from `kind.cfg.src` (prep.run.staging has the guarantees)."""
    cfg = kind.cfg
    if cfg.backend == "auto":
        cfg.backend = "threads" if kind.threads else "loky"
    if cfg.append:
        grow.check_append(cfg, kind.appendable, kind.command)
    if cfg.staging is not None or grow.remote_out(cfg.out):  # a remote OUT: prep.run.remote
        from prep.run.remote import run_remote

        return run_remote(kind, run, show_progress, profile)
    cfg.validate()
    check_backend(cfg.backend)
    start = time.perf_counter()
    out = Path(os.path.abspath(str(cfg.out)))
    check_out(out, kind.sources(), cfg.overwrite, cfg.resume or cfg.append)  # before listing
    with locked(out):
        recover(out)
        timer = StageTimer()
        parent = grow.open_parent(out, kind.command, cfg) if cfg.append else None
        with timer.stage("list"):
            inputs = kind.list_inputs()
        ids = kind.identities() if kind.appendable else {}
        plan = {"config": cfg.output_config(), "inputs": inputs.fingerprint, "count": inputs.count}
        if parent is not None and not _new_inputs(kind, parent, ids, inputs, plan):
            return _unchanged(kind, out, parent, len(ids), start)  # (a finished append again)
        if parent is None and cfg.resume and not cfg.overwrite and st.finished(out, plan):
            return _finished(kind, out, start)  # killed after the swap: nothing left to do
        staging = _staged(kind, out, plan, parent, timer)
        shards = kind.plan()
        first = parent.first_task if parent else 0  # new shards' file numbers follow the old
        found = {i: st.load_record(staging, first + i, verify=True) for i in range(len(shards))}
        records = {i: r for i, r in found.items() if r and kind.reusable(r)} if cfg.resume else {}
        reused, prepared = len(records), time.perf_counter() - start
        records |= _run_shards(kind, shards, records, staging, timer, show_progress, profile, first)
        ordered = [records[i] for i in sorted(records)]
        try:
            manifest, seen = _finish(kind, inputs, ordered, staging, out, ids)
        except OSError as e:
            raise write_error(e, str(staging)) from e
    summary = _summary(kind, out, manifest, seen, len(ordered), reused, start)
    summary.rejects = inputs.rejects + [r for rec in ordered for r in rec["rejects"]]
    if parent is not None:
        _appended(summary, kind, out, parent, len(ids) - inputs.count)
    summary.prepare_seconds = prepared
    summary.stages = timer.seconds if profile else None
    return summary


def _finished(kind: Kind[Any, Any], out: Path, start: float) -> RunSummary:
    """The summary of OUT, finished by an earlier run of the same plan (--resume)."""
    manifest = read_manifest(out)
    # the shard tasks: the files' task numbers (a task may write a shard per split)
    n = len({f.rsplit("-", 1)[1] for s in manifest.shards for f in s.files})
    return _summary(kind, out, manifest, manifest.num_samples + manifest.rejects, n, n, start)


def _staged(
    kind: Kind[Any, Any], out: Path, plan: dict[str, Any], parent: Parent | None, timer: StageTimer
) -> Path:
    """The run folder, made or resumed, `kind.prepare`d, an append's parent linked in."""
    cfg = kind.cfg
    staging = st.prepare_staging(out, plan, cfg.overwrite, cfg.resume)
    try:
        with timer.stage(kind.prepare_stage) if kind.prepare_stage else nullcontext():
            kind.prepare(staging, cfg.resume)
        if parent is not None:
            grow.link_parent(out, staging, parent)
    except OSError as e:
        raise write_error(e, str(staging)) from e
    return staging


def _appended(
    summary: RunSummary, kind: Kind[Any, Any], out: Path, parent: Parent, skipped: int
) -> None:
    """An append's summary counts this run's work, not the dataset's."""
    summary.skipped, summary.rejected = skipped, len(summary.rejects)
    summary.inputs += summary.skipped
    summary.packed -= parent.manifest.num_samples
    summary.bytes -= kind.bytes(out, parent.manifest)


def _run_shards(
    kind: Kind[Any, Any],
    shards: Sequence[Any],
    done: dict[int, dict[str, Any]],
    staging: Path,
    timer: StageTimer,
    show_progress: bool,
    profile: bool,
    first: int = 0,
) -> dict[int, dict[str, Any]]:
    """Run the shard tasks not `done`, costliest first; their records by shard index (shard i
    is task `first + i`: an append's new shards are numbered after the old)."""
    cfg = kind.cfg
    todo = sorted(
        (i for i in range(len(shards)) if i not in done), key=lambda i: -kind.cost(shards[i])
    )
    parent = os.getpid() if cfg.backend == "loky" else None  # see shardwriter.exit_with_parent
    args = [(*kind.task_args(first + i, shards[i], staging.absolute()), parent) for i in todo]
    total = sum(kind.weight(shards[i]) for i in todo)
    bar = progress(total, kind.unit, f"{cfg.SECTION} {staging.name}", show_progress)
    bar.set_postfix_str(f"0/{len(todo)} shards")  # items with rate and ETA, shards done
    task = functools.partial(run_profiled, profile, kind.task)
    records: dict[int, dict[str, Any]] = {}
    try:
        for rec in run_tasks(task, args, cfg.n_jobs, cfg.backend, cfg.scheduler):
            timer.add(rec.pop("stages", {}))
            records[rec["index"] - first] = rec
            bar.set_postfix_str(f"{len(records)}/{len(todo)} shards", refresh=False)
            bar.update(kind.weight(shards[rec["index"] - first]))
    except BaseException:
        st.cleanup_temps(staging)
        raise
    finally:
        bar.close()
    return records


def _finish(
    kind: Kind[Any, Any],
    inputs: Inputs,
    records: list[dict[str, Any]],
    staging: Path,
    out: Path,
    ids: dict[str, str],
) -> tuple[Manifest, int]:
    """rejects.jsonl, the --max-rejects check, the manifest (last), the swap; (manifest, seen)."""
    cfg, parent = kind.cfg, kind.parent
    rejects = inputs.rejects + [r for rec in records for r in rec["rejects"]]
    kept = st.write_rejects(staging, grow.unique_rejects(rejects, parent))
    seen = kind.seen(inputs, records)
    by_path = sorted(rejects, key=lambda r: str(r["path"]))  # this run's: as rejects.jsonl
    counted = [r for r in by_path if r["reason"] not in kind.chosen_rejects]
    if seen and len(counted) / seen > cfg.max_rejects:
        reasons = Counter(r["reason"] for r in counted).most_common()
        named = named_rejects(counted, reason=False)
        raise PrepError(
            f"{len(counted)} of {seen} {kind.noun} rejected ({len(counted) / seen:.1%} > "
            f"--max-rejects {cfg.max_rejects:g}: "
            + ", ".join(f"{n} {reason}" for reason, n in reasons)
            + (f": {named}" if named else "")
            + f"); each is a line of {staging / REJECTS}. HINT: rerun with --resume and a "
            "higher --max-rejects to keep the rest (finished shards are reused), or fix the "
            "inputs and rerun with --overwrite"
        )
    manifest = kind.manifest(records)
    if parent is not None:  # the parent's shards first, as they were
        manifest.shards = [*parent.manifest.shards, *manifest.shards]
        manifest.parent = parent.sha
        manifest.removed = list(parent.manifest.removed)  # still hidden: indices unchanged
    if kind.appendable:  # what a later append needs
        before = (parent.inputs if parent else {}) | ids
        grow.write_state(staging, before, kind.before(grow.trimmed(records)))
    manifest.config = cfg.output_config()
    manifest.rejects = len(kept)
    manifest.tool_version = __version__
    manifest.extra["inputs"] = inputs.fingerprint  # as the plan's: see staging.finished
    st.write_manifest(staging, manifest)
    write_card(out, staging)  # metadata like the manifest: the user's parts of OUT's card kept
    install(staging, out)
    return manifest, seen


def _new_inputs(
    kind: Kind[Any, Any], parent: Parent, ids: dict[str, str], inputs: Inputs, plan: dict[str, Any]
) -> bool:
    """--append: keep the inputs `parent` lacks (refusing other fields); whether there is any."""
    inputs.count = kind.grow(parent, grow.fresh(parent, ids))
    grow.check_fields(parent.manifest, kind.described(), array_specs(kind.fields))
    plan |= {"count": inputs.count, "parent": parent.sha}  # a resume of another parent: refused
    return inputs.count > 0


def _unchanged(
    kind: Kind[Any, Any], out: Path, parent: Parent, listed: int, start: float
) -> RunSummary:
    """An append whose inputs the dataset holds: nothing written."""
    summary = _summary(kind, out, parent.manifest, listed, 0, 0, start)
    summary.packed, summary.rejected, summary.bytes, summary.skipped = 0, 0, 0, listed
    return summary


def _summary(
    kind: Kind[Any, Any],
    out: Path,
    m: Manifest,
    seen: int,
    shards: int,
    reused: int,
    start: float,
) -> RunSummary:
    return kind.summary(
        out=Path(str(kind.cfg.out)),
        inputs=seen,
        packed=m.num_samples,
        rejected=m.rejects,
        shards=shards,
        reused=reused,
        bytes=kind.bytes(out, m),
        seconds=time.perf_counter() - start,
        manifest=m,
    )
