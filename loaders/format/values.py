"""The values of a shard's arrays against the manifest: token ids below `vocab_size` (token
datasets, a samples dataset's Tokens fields), table codes inside their column's vocabulary,
volume target codes inside their classes. Values out of range pass every other check, then
fail on the GPU (an embedding's device-side assert).

Each array is read once in chunks of CHUNK_BYTES, so memory stays bounded whatever the dataset's
size: `prep verify` runs these (check_files' `values`), and so can a remote backend on the
cached copies of a shard's files (`value_problems`, or check_shard with `values=True`). Labels
against `classes` are checked when a dataset is opened (a few bytes a sample), not here."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from loaders.format.arrays import Layout
from loaders.format.schema import Manifest, Shard

CHUNK_BYTES = 16 << 20  # read at a time (one chunk in memory: 16 MB)

Arrays = dict[str, tuple[Path, Layout]]  # a shard's arrays: name -> file, checked layout
Limit = tuple[int, Callable[[int], str]]  # the largest value allowed, and the problem past it


def value_range(path: Path, layout: Layout) -> tuple[int, int] | None:
    """(smallest, largest) value of an integer array, read CHUNK_BYTES at a time (None: empty).

    The layout must be check_array's: the file holds every element it claims."""
    offset, dtype, shape = layout
    left = math.prod(shape)
    step = max(1, CHUNK_BYTES // dtype.itemsize)
    low, high = None, None
    with open(path, "rb") as f:
        f.seek(offset)
        while left:
            chunk = np.fromfile(f, dtype, min(step, left))
            if len(chunk) == 0:  # shorter than checked: shrunk since
                raise OSError(f"{path} ended early")
            left -= len(chunk)
            lo, hi = int(chunk.min()), int(chunk.max())
            del chunk  # before the next one is read
            low, high = lo if low is None else min(low, lo), hi if high is None else max(high, hi)
    return None if low is None or high is None else (low, high)


def _token_limits(m: Manifest) -> dict[str, Limit]:
    return {"tokens": _vocab_limit(int(m.extra["vocab_size"]))}  # checked when read


def _code_limit(column: str, vocab: int, first: int) -> Limit:
    top = vocab - 1 + first
    return top, lambda v: f"code {v} is beyond column {column}'s codes 0..{top}"


def _table_limits(m: Manifest) -> dict[str, Limit]:
    """Coded columns: 0 missing, 1 unseen in train, then the vocabulary from 2 (prep table);
    a class target's vocabulary from its `first_code`, 0."""
    columns = {c["name"]: c for c in m.extra["columns"]}
    return {
        array: _code_limit(name, len(columns[name]["vocab"]), columns[name].get("first_code", 2))
        for array, name in m.extra["arrays"].items()
        if "vocab" in columns[name]
    }


def _volume_limits(m: Manifest) -> dict[str, Limit]:
    """Volume targets with class names: codes index them."""
    targets = m.extra.get("targets") or []
    return {
        t["array"]: _code_limit(t.get("column", t["array"]), len(t["classes"]), 0)
        for t in targets
        if t.get("classes") is not None
    }


def _sample_limits(m: Manifest) -> dict[str, Limit]:
    """A samples dataset's Tokens fields: ids below their vocab_size (extra.fields, checked
    when the manifest was read)."""
    fields = m.extra["fields"]
    return {
        name: _vocab_limit(int(d["vocab_size"]))
        for name, d in fields.items()
        if d["kind"] == "tokens"
    }


def _vocab_limit(vocab: int) -> Limit:
    return vocab - 1, lambda v: f"token id {v} is not below vocab_size {vocab}"


LIMITS: dict[str, Callable[[Manifest], dict[str, Limit]]] = {
    "samples": _sample_limits,
    "tokens": _token_limits,
    "table": _table_limits,
    "volumes": _volume_limits,
}


def value_problems(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """Values of one shard out of the manifest's range, one line each naming the file; `arrays`
    holds the shard's arrays as check_array laid them out (check_shard does both)."""
    limits = LIMITS.get(manifest.kind, lambda m: {})(manifest)
    found = []
    for name, (top, problem) in sorted(limits.items()):
        if name not in arrays or not shard.arrays[name].length:
            continue
        path, layout = arrays[name]
        if layout[1].kind not in "iu":
            found.append(f"{path}: {name} holds {layout[1]}, not the integer codes it needs")
            continue
        low, high = value_range(path, layout) or (0, 0)
        if low < 0:
            found.append(f"{path}: {name} holds {low}, not a code (0..{top})")
        elif high > top:
            found.append(f"{path}: {problem(high)}")
    return found
