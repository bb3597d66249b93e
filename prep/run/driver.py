"""The run driver every writing command uses: list -> plan -> one task per shard -> records ->
manifest last -> install. A data kind supplies `Kind`; guards, resuming, progress, backends and
--max-rejects are here, once."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from loaders.fields import Field
from loaders.format import REJECTS, ArraySpec, Manifest, Shard, array_name, read_manifest
from prep.run import grow
from prep.run import staging as st
from prep.run.card import write_card
from prep.run.config import RunConfig
from prep.run.errors import PrepError, write_error
from prep.run.grow import Parent
from prep.run.guard import check_out, install, locked, recover
from prep.run.inputs import named_rejects
from prep.run.parallel import check_backend, progress, run_tasks
from prep.run.profile import StageTimer, run_profiled
from prep.run.shardwriter import compressed
from prep.run.version import __version__

C = TypeVar("C", bound=RunConfig)
S = TypeVar("S")  # what one shard task is given: its inputs
T = TypeVar("T")
# The default shard size: AUTO_SHARDS tasks keep 2-16 cores busy to the end (the costliest run
# first); AUTO_MIN keeps a shard's fixed cost (a few files and fsyncs) small beside its work.
AUTO_SHARDS, AUTO_MIN, AUTO_MAX = 32, 16, 1000


def shard_size(count: int, chosen: int | None) -> int:
    """Samples per shard: `chosen`, else from the input count alone (never --jobs: same bytes).

    >>> [shard_size(n, None) for n in (24, 180, 720, 2000, 10**6)], shard_size(180, 50)
    ([16, 16, 23, 63, 1000], 50)
    """
    if chosen is not None:
        return chosen
    return min(AUTO_MAX, max(AUTO_MIN, -(-count // AUTO_SHARDS)))


def split_shards(items: list[T], splits: list[Any], chosen: int | None) -> list[list[T]]:
    """Each split's items (`.split`, in `splits` order) cut into shards of shard_size."""
    size = shard_size(len(items), chosen)
    shards = []
    for split in splits:  # a shard holds one split's inputs
        part = [it for it in items if getattr(it, "split", None) == split]
        shards += [part[i : i + size] for i in range(0, len(part), size)]
    return shards


def grouped(items: Iterable[T], size: Callable[[T], int], limit: int) -> list[list[T]]:
    """Consecutive items grouped until a group's sizes sum to `limit` (the last may hold less)."""
    groups: list[list[T]] = [[]]
    total = 0
    for it in items:
        groups[-1].append(it)
        total += size(it)
        if total >= limit:
            groups.append([])
            total = 0
    return [g for g in groups if g]


def array_specs(fields: Mapping[str, Field], cfg: Any = None) -> dict[str, ArraySpec]:
    """The fields' arrays by name; with `cfg`, marked as its --compress compresses them."""
    specs = {array_name(s.field, s.size): s for n, f in fields.items() for s in f.arrays(n)}
    if cfg is None:
        return specs
    return compressed(specs, getattr(cfg, "compress", "none"), getattr(cfg, "compress_level", 3))


def fingerprint(seen: Any) -> str:
    """The sha256 of `seen` as JSON: the inputs as --resume compares them."""
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()


@dataclass
class Inputs:
    """What a kind listed: usable inputs, refused ones, and a fingerprint of all but the config."""

    count: int
    rejects: list[dict[str, Any]]
    fingerprint: str


@dataclass
class RunSummary:
    out: Path
    inputs: int  # inputs seen: used or rejected
    packed: int  # samples (documents) written
    rejected: int
    shards: int  # shard tasks
    reused: int  # of those, finished by an earlier run
    bytes: int
    seconds: float
    manifest: Manifest
    prepare_seconds: float = 0.0  # before the tasks: listing, planning, fitting a tokenizer
    stages: dict[str, float] | None = field(default=None)  # with profile: seconds per stage
    rejects: list[dict[str, Any]] = field(default_factory=list)  # this run's, when it listed
    skipped: int | None = None  # --append: inputs the dataset already held (None: no append)

    def line(self) -> str:
        rate = self.packed / self.seconds if self.seconds else 0.0
        return (
            f"{self.out}: {self.inputs} inputs{self.held()}, {self.packed} packed, "
            f"{self.said_rejected()}, {self.shards} shards ({self.reused} reused), "
            f"{self.bytes / 1e6:.1f} MB written, {self.seconds:.1f} s, {rate:.0f} items/s"
        )

    def held(self) -> str:
        """--append: " (N already in the dataset)"."""
        return "" if self.skipped is None else f" ({self.skipped} already in the dataset)"

    def said_rejected(self) -> str:
        """ "N rejected", naming them when there are one or two."""
        named = named_rejects(self.rejects)
        return f"{self.rejected} rejected{f' ({named})' if named else ''}"


class Kind(ABC, Generic[C, S]):
    """One data kind: what the driver asks of it. A kind object lives for one run."""

    unit: ClassVar[str] = "img"  # of the progress bar: what `weight` counts
    noun: ClassVar[str] = "inputs"  # what --max-rejects counts
    counted: ClassVar[str | None] = None  # the record key that counts them (None: inputs.count)
    summary: ClassVar[type[RunSummary]] = RunSummary
    prepare_stage: ClassVar[str | None] = None  # the profile's stage for `prepare` (None: untimed)
    threads: ClassVar[bool] = False  # the task releases the GIL: --backend auto runs threads
    # Reject reasons the user asked for (--drop-dupes: duplicate): never count for --max-rejects
    chosen_rejects: ClassVar[frozenset[str]] = frozenset()
    appendable: ClassVar[bool] = False  # --append: identities() and grow() are implemented
    parent: Parent | None = None  # the dataset an --append grows (set by grow())
    task: Callable[..., dict[str, Any]]  # the shard task: a module-level function (it pickles)
    command: str  # the manifest's `command`
    fields: dict[str, Field]  # set once the inputs are listed (or in `prepare`)

    def __init__(self, cfg: C):
        self.cfg = cfg

    def sources(self) -> list[Path]:
        """Paths the run reads: OUT may not hold any of them."""
        return [Path(str(self.cfg.src))]

    @abstractmethod
    def list_inputs(self) -> Inputs: ...

    @abstractmethod
    def plan(self) -> Sequence[S]:
        """The shards' inputs in manifest order, from the inputs and config only."""

    def prepare(self, staging: Path, resume: bool) -> None:
        """Once the run folder exists, before any task (e.g. fit and save a tokenizer)."""

    def identities(self) -> dict[str, str]:
        """Each listed input's name -> what makes it the same input: --append skips an input
        whose name and identity the dataset holds."""
        raise NotImplementedError

    def grow(self, parent: Parent, fresh: set[str]) -> int:
        """Keep only the inputs named in `fresh`, grow class maps from `parent`'s (old ids
        kept), set `self.parent`; the number of inputs kept."""
        raise NotImplementedError

    def before(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The parent's shard records (split, count, stats) and `records`: stats of the whole."""
        return (self.parent.records if self.parent else []) + records

    def weight(self, shard: S) -> int:
        """The shard's work in `unit`s, for the progress bar."""
        return len(shard)  # type: ignore[arg-type]

    def cost(self, shard: S) -> int:
        """The shard's expected time, in any unit: the costliest shards run first."""
        return self.weight(shard)

    @abstractmethod
    def task_args(self, index: int, shard: S, staging: Path) -> tuple[Any, ...]:
        """The arguments of `task` for shard `index` (small and picklable)."""

    def reusable(self, record: dict[str, Any]) -> bool:
        """Whether an earlier run's verified record fits this run: files named by the rule."""
        arrays = array_specs(self.fields, self.cfg)
        storage = getattr(self.cfg, "format", "npy")
        return all(
            st.named_by_rule(s, arrays, storage) for s in record.get("splits", [record["shard"]])
        )

    def seen(self, inputs: Inputs, records: list[dict[str, Any]]) -> int:
        """Inputs seen, used or rejected (what --max-rejects divides by)."""
        used = sum(rec[self.counted] for rec in records) if self.counted else inputs.count
        return used + len(inputs.rejects)

    def manifest(self, records: list[dict[str, Any]]) -> Manifest:
        """The manifest from the shard records in order; the driver adds config and counts."""
        return Manifest(
            storage=getattr(self.cfg, "format", "npy"),  # only some kinds offer --format
            arrays=array_specs(self.fields, self.cfg),
            shards=[Shard.from_dict(s) for r in records for s in r.get("splits", [r["shard"]])],
            fields=self.described(),
            command=self.command,
            extra=self.extra(records),
        )

    def described(self) -> dict[str, Any]:
        return {name: f.describe() for name, f in self.fields.items()}

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {}

    def bytes(self, out: Path, manifest: Manifest) -> int:
        return sum(f.bytes for s in manifest.shards for f in s.files.values())


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
            manifest = read_manifest(out)  # killed after the swap: nothing left to do
            # the shard tasks: the files' task numbers (a task may write a shard per split)
            n = len({f.rsplit("-", 1)[1] for s in manifest.shards for f in s.files})
            return _summary(
                kind, out, manifest, manifest.num_samples + manifest.rejects, n, n, start
            )
        staging = st.prepare_staging(out, plan, cfg.overwrite, cfg.resume)
        try:
            with timer.stage(kind.prepare_stage) if kind.prepare_stage else nullcontext():
                kind.prepare(staging, cfg.resume)
            if parent is not None:
                grow.link_parent(out, staging, parent)
        except OSError as e:
            raise write_error(e, str(staging)) from e
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
    if parent is not None:  # this run's work, not the dataset's
        summary.skipped, summary.rejected = len(ids) - inputs.count, len(summary.rejects)
        summary.inputs += summary.skipped
        summary.packed -= parent.manifest.num_samples
        summary.bytes -= kind.bytes(out, parent.manifest)
    summary.prepare_seconds = prepared
    summary.stages = timer.seconds if profile else None
    return summary


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
