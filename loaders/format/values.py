"""The values of a shard's arrays against the manifest: token ids below `vocab_size` (token
datasets, a samples dataset's Tokens fields), table codes inside their column's vocabulary,
volume target codes inside their classes. Values out of range pass every other check, then
fail on the GPU (an embedding's device-side assert). A samples dataset's Text samples must be
UTF-8, and its Json samples JSON of at most 1 MiB (a reader parses them).

Each array is read once in chunks of CHUNK_BYTES, so memory stays bounded whatever the dataset's
size: `prep verify` runs these (check_files' `values`), and so can a remote backend on the
cached copies of a shard's files (`value_problems`, or check_shard with `values=True`). Labels
against `classes` are checked when a dataset is opened (a few bytes a sample), not here."""

from __future__ import annotations

import bisect
import codecs
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format.arrays import Layout, read_layout
from loaders.format.schema import OFFSETS, Manifest, Shard

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
    found = _string_problems(manifest, arrays) if manifest.kind == "samples" else []
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


def _string_problems(manifest: Manifest, arrays: Arrays) -> list[str]:
    """A samples dataset's Text and Json fields (extra.fields, checked when the manifest was
    read): the first sample of each that is not UTF-8, or not JSON."""
    found = []
    for name, d in sorted(manifest.extra["fields"].items()):
        if d["kind"] in ("text", "json") and name in arrays and name + OFFSETS in arrays:
            off = read_layout(*arrays[name + OFFSETS])
            problem = string_problem(name, *arrays[name], off, d["kind"] == "json")
            found += [problem] if problem else []
    return found


def string_problem(
    name: str, path: Path, layout: Layout, off: np.ndarray, json: bool
) -> str | None:
    """The first sample of ragged uint8 array `name` (offsets `off`) that is not UTF-8 (with
    `json`: not JSON, or over MAX_JSON_BYTES: decided by its offsets, never read), read a
    block at a time: memory stays bounded whatever a sample's length."""
    from loaders.fields.text import MAX_JSON_BYTES, parse_json  # the field kinds: when needed

    sizes = np.diff(off)
    big = np.flatnonzero(sizes > (MAX_JSON_BYTES if json else np.inf))
    if len(big):
        k = int(big[0])
        return f"{path}: sample {k} of {name} holds {int(sizes[k]):,} bytes of JSON; at most 1 MiB"
    decoder, text = codecs.getincrementaldecoder("utf-8")(), list[str]()
    for k, part, last in _parts(path, layout, off):
        try:
            text.append(decoder.decode(part, final=last))
        except UnicodeDecodeError as e:
            return f"{path}: sample {k} of {name} is not UTF-8 ({e.reason})"
        if not last:
            continue
        if json:
            try:
                parse_json("".join(text))
            except ValueError as e:
                return f"{path}: sample {k} of {name} is not JSON ({str(e)[:80]})"
        decoder.reset()
        text.clear()
    return None


def _parts(path: Path, layout: Layout, off: np.ndarray) -> Iterator[tuple[int, bytes, bool]]:
    """Each sample k of a ragged uint8 array as (k, bytes, whether they are its last), read
    CHUNK_BYTES of samples at a time; a longer sample in parts of CHUNK_BYTES."""
    bounds, start = off.tolist(), layout[0]
    k, n = 0, len(bounds) - 1
    with open(path, "rb") as f:
        while k < n:
            a = bounds[k]
            j = max(k + 1, bisect.bisect_right(bounds, a + CHUNK_BYTES, k + 1, n + 1) - 1)
            f.seek(start + a)
            if bounds[j] - a <= CHUNK_BYTES:  # whole samples k..j-1 in one read
                block = _read(f, bounds[j] - a, path)
                for i in range(k, j):
                    yield i, block[bounds[i] - a : bounds[i + 1] - a], True
            else:  # one sample longer than a block
                for pos in range(a, bounds[j], CHUNK_BYTES):
                    end = min(pos + CHUNK_BYTES, bounds[j])
                    yield k, _read(f, end - pos, path), end == bounds[j]
            k = j


def _read(f: Any, n: int, path: Path) -> bytes:
    data = f.read(n)
    if len(data) != n:  # shorter than checked: shrunk since
        raise OSError(f"{path} ended early")
    return data
