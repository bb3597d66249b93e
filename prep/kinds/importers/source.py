"""The samples run over a listed prep.sources.samples.Source (Hugging Face folders, WebDataset
tars): each split in its own shards, each sample's `source` its place in the source."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaders.remote.storage import url_of
from prep.run.errors import PrepError
from prep.run.grow import file_identity
from prep.run.kind import Inputs, fingerprint
from prep.run.samples import SamplesRun, UserFunction
from prep.sources.samples import Source


class SourceKind(SamplesRun):
    """The samples run over a listed `Source`: `make(item.value)` builds each sample."""

    sourced = True
    appendable = True
    grows_classes = True
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

    def identities(self) -> dict[str, str]:
        """A sample's name (its file and row or key) and its file's size and time: the
        file's index in the listing moves when new files sort before it."""
        fn = self.make.fn
        files: tuple[str, ...] = getattr(fn, "files", ()) or getattr(fn, "tars", ())  # HF, wds
        stamps = [file_identity(f) for f in files]
        return {it.rel: stamps[it.value[0]] for it in self.items}

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for rec in self.before(records):  # an append's new counts added to the dataset's
            split = rec["shard"]["split"]
            if split is not None:
                counts[split] = counts.get(split, 0) + rec["shard"]["count"]
        out = super().extra(records) | self.source.extra
        return out | {"splits": counts} if counts else out
