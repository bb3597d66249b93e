"""What an importer whose source it lists itself (Hugging Face folders, WebDataset tars) hands
its run: the inputs by name, split by split, a fingerprint of the files read, and what the
manifest records of the source. Each shard holds one split's samples (its `split`), so that
a split reads its own shards, as tokenize's and table's do."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prep.run.samples import Item


@dataclass
class Source:
    """A listed source. `items` are in order, each split's together (Item.split); `splits`
    counts them (split name -> items; one None split when the source has no splits)."""

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
