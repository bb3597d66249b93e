"""What an importer whose source it lists itself (Hugging Face folders, WebDataset tars) hands
the samples kind: the inputs by name, split by split, a fingerprint of the files read, and what
the manifest records of the source. Each shard holds one split's samples (its `split`), so that
a split reads its own shards, as tokenize's and table's do."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaders.format import Manifest
from loaders.remote.storage import url_of
from prep.kinds.samples.pack import SamplesKind
from prep.kinds.samples.recipe import check_shippable
from prep.run.driver import Inputs, RunSummary, run, shard_size
from prep.run.errors import PrepError
from prep.sources.samples import Item, Listing


@dataclass
class Source:
    """A listed source. `items` are in order, each split's together; `splits` counts them
    (split name -> items; one None split when the source has no splits)."""

    items: list[Item]
    splits: dict[str | None, int]
    rejects: list[dict[str, Any]] = field(default_factory=list)
    stats: list[Any] = field(default_factory=list)  # what the output depends on in the files
    extra: dict[str, Any] = field(default_factory=dict)  # the manifest's, besides the fields


def file_stats(paths: list[Path]) -> list[tuple[str, int, int]]:
    """Name, size and time of each file: a changed source is not resumed as the same."""
    out = []
    for p in paths:
        st = p.stat()
        out.append((str(p), st.st_size, st.st_mtime_ns))
    return out


class SourceKind(SamplesKind):
    """The samples kind over a listed `Source`: `make(item.value)` builds each sample."""

    def __init__(
        self, cfg: Any, make: Callable[[Any], Any], fields: dict[str, Any], source: Source
    ):
        super().__init__(cfg, make, fields, None)
        self.source = source

    def sources(self) -> list[Path]:
        """SRC, which OUT may not hold (a pattern's folder counts: OUT may not be it)."""
        return [] if url_of(self.cfg.src) else [Path(str(self.cfg.src))]

    def list_inputs(self) -> Inputs:
        items = self.source.items[: self.cfg.limit]
        if not items:
            n = len(self.source.rejects)
            raise PrepError(f"no inputs in {self.cfg.src} ({n} rejected). HINT: check SRC")
        said = [self.source.stats, len(items), self.described(), repr(self.make)]
        digest = hashlib.sha256(json.dumps(said, default=str).encode()).hexdigest()
        self.listing = Listing(items, self.source.rejects, None, digest)
        if self.cfg.backend != "threads":
            check_shippable(self.make, self.cfg.backend)
        return Inputs(len(items), self.source.rejects, digest)

    def plan(self) -> list[list[Item]]:
        """Each split cut into shards of the size the whole count gives."""
        size = shard_size(len(self.listing.items), self.cfg.shard_size)
        shards, self.shard_splits, start = [], [], 0
        for split, count in self.source.splits.items():
            items = self.listing.items[start : start + count]
            start += count
            for i in range(0, len(items), size):
                shards.append(items[i : i + size])
                self.shard_splits.append(split)
        return shards

    def manifest(self, records: list[dict[str, Any]]) -> Manifest:
        out = super().manifest(records)
        counts: dict[str, int] = {}
        for shard, split in zip(out.shards, self.shard_splits, strict=True):
            shard.split = split
            if split is not None:
                counts[split] = counts.get(split, 0) + shard.count
        out.extra |= self.source.extra
        if counts:
            out.extra["splits"] = counts
        return out


def run_source(
    cfg: Any,
    make: Callable[[Any], Any],
    fields: dict[str, Any],
    source: Source,
    show_progress: bool,
    profile: bool,
) -> RunSummary:
    return run(SourceKind(cfg, make, fields, source), show_progress, profile)
