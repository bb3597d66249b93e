"""`prep samples` options (prep.run.config has the options every command shares)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from loaders.format import STORAGES
from prep.run.config import RunConfig, check, choice, opt


@dataclass
class SamplesConfig(RunConfig):
    src: str | None = opt(
        None, "A .csv/.jsonl/.parquet file (rows as dicts), a .txt of paths, or a folder."
    )
    recipe: str | None = opt(None, "A .py file defining FIELDS (name -> field) and make(input).")
    format: str = opt("npy", "Shard files: npy (one per array) | h5 (one per shard).")
    shard_size: int | None = opt(None, "Samples per shard (default: from the input count).")

    SECTION: ClassVar[str] = "samples"

    def validate(self) -> None:
        super().validate()
        choice(self.format, STORAGES, "--format")
        check(self.shard_size is None or self.shard_size >= 1, "--shard-size", "at least 1")
