"""Editing a dataset's manifest the way a hostile or hand-made dataset could be: as one JSON
object whose shards are listed inline (format version 4 keeps them in a binary shard index,
loaders.format.schema; a manifest may list them instead, which is what these edits write)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaders.format import MANIFEST, read_manifest
from loaders.format.index import DIGESTS, SHARDS


def load(root: Path) -> dict[str, Any]:
    """The manifest of `root` as JSON, its shards inline."""
    d = json.loads((root / MANIFEST).read_text())
    if "index" in d:
        d["shards"] = [dataclasses.asdict(s) for s in read_manifest(root).shards]
        del d["index"]
    return d


def save(root: Path, d: dict[str, Any]) -> None:
    """Write `d` as `root`'s manifest (its index files gone, the shards inline)."""
    (root / MANIFEST).write_text(json.dumps(d, indent=1))
    if "index" not in d:
        for name in (SHARDS, DIGESTS):
            (root / name).unlink(missing_ok=True)


def edit_manifest(root: Path, change: Callable[[dict[str, Any]], Any]) -> Path:
    """`change` the manifest of `root` in place (as JSON, shards inline)."""
    d = load(root)
    change(d)
    save(root, d)
    return root
