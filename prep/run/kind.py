"""Kind: what the run driver (prep.run.driver) asks of a data kind, with what a kind hands
back (`Inputs`) and the pieces kinds share: `array_specs` of their fields, the inputs'
`fingerprint` for --resume."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from loaders.fields import Field
from loaders.format import ArraySpec, Manifest, Shard, array_name
from prep.run import staging as st
from prep.run.config import RunConfig
from prep.run.grow import Parent
from prep.run.shardwriter import compressed
from prep.run.summary import RunSummary

C = TypeVar("C", bound=RunConfig)
S = TypeVar("S")  # what one shard task is given: its inputs


def array_specs(fields: Mapping[str, Field], cfg: Any = None) -> dict[str, ArraySpec]:
    """The fields' arrays by name; with `cfg`, marked as its --compress compresses them."""
    specs = {array_name(s.field, s.size): s for n, f in fields.items() for s in f.arrays(n)}
    if cfg is None:
        return specs
    return compressed(specs, getattr(cfg, "compress", "none"), getattr(cfg, "compress_level", None))


def fingerprint(seen: Any) -> str:
    """The sha256 of `seen` as JSON: the inputs as --resume compares them."""
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()


@dataclass
class Inputs:
    """What a kind listed: usable inputs, refused ones, and a fingerprint of all but the config."""

    count: int
    rejects: list[dict[str, Any]]
    fingerprint: str


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
