"""The values of a shard's arrays against the bounds its fields set (Field.limits: token ids,
table and target codes, which pass every other check and then fail on the GPU; Field.strings:
UTF-8 text, JSON of at most 1 MiB). Each array is read once in chunks of CHUNK_BYTES, so memory
stays bounded: `prep verify` runs these, and so can a remote backend on its cached files."""

from __future__ import annotations

import bisect
import codecs
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format.arrays import Layout, read_layout
from loaders.format.schema import OFFSETS, Shard

CHUNK_BYTES = 16 << 20  # read at a time (one chunk in memory: 16 MB)

Arrays = dict[str, tuple[Path, Layout]]  # a shard's arrays: name -> file, checked layout


def value_range(path: Path, layout: Layout) -> tuple[int, int] | None:
    """(smallest, largest) value of an integer array, read CHUNK_BYTES at a time (None: empty);
    the layout is check_array's."""
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


def value_problems(
    shard: Shard, arrays: Arrays, limits: dict[str, tuple[int, str]], strings: dict[str, bool]
) -> list[str]:
    """Values of one shard out of its fields' `limits` and `strings` (Field's), one line each
    naming the file; `arrays` holds the shard's arrays as check_array laid them out."""
    found = []
    for name, json in sorted(strings.items()):
        if name in arrays and name + OFFSETS in arrays:
            off = read_layout(*arrays[name + OFFSETS])
            problem = string_problem(name, *arrays[name], off, json)
            found += [problem] if problem else []
    for name, (top, what) in sorted(limits.items()):
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
            found.append(f"{path}: {what.format(v=high)}")
    return found


def string_problem(
    name: str, path: Path, layout: Layout, off: np.ndarray, json: bool
) -> str | None:
    """The first sample of ragged uint8 array `name` (offsets `off`) that is not UTF-8 (with
    `json`: not JSON, or over MAX_JSON_BYTES by its offsets), read a block at a time."""
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
    CHUNK_BYTES at a time (a longer sample in parts)."""
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
