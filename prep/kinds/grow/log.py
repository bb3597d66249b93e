"""`prep log DATASET`: a dataset's versions, newest first, from each manifest's `parent` (the
sha256 of the manifest it grew from) and the manifests an append kept in `versions/`."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from loaders.format import MANIFEST, FormatError
from loaders.format.arrays import read_manifest_file
from loaders.format.schema import VERSIONS
from loaders.format.spec import is_sha256


@dataclass
class Version:
    sha: str  # the sha256 of its manifest.json bytes: what version= takes
    kept: bool  # whether its manifest is still there (a version can be read)
    parent: str | None = None
    command: str = ""
    samples: int = 0
    shards: int = 0
    tool_version: str = ""
    inputs: str = ""  # the fingerprint of the inputs that made it (extra.inputs)
    written: float = 0.0  # its manifest file's modification time (not stored: same bytes)
    made_by: str = ""  # extra.made_by: "compact" (else its command, or an --append of it)

    def line(self) -> str:
        if not self.kept:
            return f"{self.sha[:12]}  (its manifest is no longer kept)"
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.written))
        how = self.made_by or (f"{self.command} --append" if self.parent else self.command)
        return (
            f"{self.sha[:12]}  {when}  prep {how}: {self.samples} samples in {self.shards} shards"
            f"  (inputs {self.inputs[:12] or '?'}, prep {self.tool_version or '?'})"
        )


def history(root: Path) -> list[Version]:
    """The versions of the dataset at `root`, newest first, back to the first or the first
    whose manifest is gone."""
    data, st = read_manifest_file(root)
    out: list[Version] = []
    while True:
        sha = hashlib.sha256(data).hexdigest()
        try:
            d = json.loads(data)
            parent = d.get("parent") if is_sha256(d.get("parent")) else None
            shards = d["index"]["shards"] if "index" in d else len(d.get("shards", []))
            extra = d.get("extra") if isinstance(d.get("extra"), dict) else {}
            v = Version(
                sha,
                True,
                parent if isinstance(parent, str) else None,
                str(d.get("command", "")),
                int(d.get("num_samples", 0)),
                int(shards),
                str(d.get("tool_version", "")),
                str(extra.get("inputs", "")),
                st.st_mtime,
                str(extra.get("made_by", "")),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise FormatError(f"{root}: manifest {sha[:12]} is malformed ({e})") from e
        out.append(v)
        if v.parent is None or any(o.sha == v.parent for o in out):  # the first (or a loop)
            return out
        folder = root / VERSIONS / v.parent
        if not (folder / MANIFEST).is_file():
            out.append(Version(v.parent, False))
            return out
        data, st = read_manifest_file(folder)


def log(root: Path) -> str:
    """`prep log`'s text: a line a version, newest first."""
    if not os.path.isdir(root):
        raise FormatError(f"{root} is not a dataset folder. HINT: name a folder prep wrote")
    return "\n".join(v.line() for v in history(root))
