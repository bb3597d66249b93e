"""`prep upgrade ROOT`: a dataset of format version 1-3 rewritten as version 4 in place, its
manifest alone (written to a temp name, renamed). The shards stay listed in the manifest (version
4's inline form): their file names predate the names the shard index derives, and renaming a
user's files in place could not be undone at once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from loaders.fields.checks import load_manifest
from loaders.format import FORMAT_VERSION, MANIFEST
from prep.run.errors import PrepError
from prep.run.files import atomic_write_text
from prep.run.guard import locked


def upgrade(root: Path) -> str:
    """Rewrite `root`'s manifest as version 4; the line that says what was done."""
    if not (root / MANIFEST).is_file():
        raise PrepError(f"{root} holds no prep dataset (no {MANIFEST}). HINT: name its folder")
    with locked(root):
        m = load_manifest(root)  # every file checked first: an upgrade changes no bytes
        was = m.format_version
        if was == FORMAT_VERSION:
            return f"{root}: already format version {FORMAT_VERSION}, nothing to do"
        new = dataclasses.replace(m, format_version=FORMAT_VERSION, index=None, shards=[*m.shards])
        atomic_write_text(root / MANIFEST, new.to_json())
    return (
        f"{root}: format version {was} -> {FORMAT_VERSION}, {len(m.shards)} shards, files unchanged"
    )
