"""The samples run over a listed prep.sources.samples.Source (Hugging Face folders, WebDataset
tars): each split in its own shards, each sample's `source` its place in the source."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaders.remote.storage import url_of
from prep.run.driver import Inputs, fingerprint
from prep.run.errors import PrepError
from prep.run.samples import SamplesRun, UserFunction
from prep.sources.samples import Source


class SourceKind(SamplesRun):
    """The samples run over a listed `Source`: `make(item.value)` builds each sample."""

    sourced = True
    make: UserFunction

    def __init__(self, cfg: Any, make: Callable[[Any], Any], fields: Any, source: Source):
        super().__init__(cfg)
        self.command = f"import {cfg.SECTION}"
        self.make, self.source = UserFunction(make), source
        self.declare(fields)

    def sources(self) -> list[Path]:
        """SRC, which OUT may not hold."""
        return [] if url_of(self.cfg.src) else [Path(str(self.cfg.src))]

    def list_inputs(self) -> Inputs:
        self.items = self.source.items[: self.cfg.limit]
        if not self.items:
            n = len(self.source.rejects)
            raise PrepError(f"no inputs in {self.cfg.src} ({n} rejected). HINT: check SRC")
        said = [self.source.stats, len(self.items), self.described(), repr(self.make.fn)]
        return Inputs(len(self.items), self.source.rejects, fingerprint(said))

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for rec in records:
            split = rec["shard"]["split"]
            if split is not None:
                counts[split] = counts.get(split, 0) + rec["shard"]["count"]
        out = super().extra(records) | self.source.extra
        return out | {"splits": counts} if counts else out
