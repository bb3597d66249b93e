"""RunSummary: what a run wrote and how long it took, and its one-line report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaders.format import Manifest
from prep.run.inputs import named_rejects


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
