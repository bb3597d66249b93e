"""Checking a dataset folder against its manifest (docs/format.md, "What readers refuse"): its
files, every array's header, each array's counts and offsets, then each field's `problems`; `prep
verify` also reads every value against the fields' `limits` and text as UTF-8 (JSON), CHUNK_BYTES
at a time (memory stays bounded; a remote backend runs the same on its cached files)."""

from __future__ import annotations

import bisect
import codecs
import functools
import math
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import declared
from loaders.fields.text import MAX_JSON_BYTES, Json, Text, parse_json
from loaders.format.arrays import (
    Arrays,
    Layout,
    check_array,
    read_layout,
    read_manifest,
    safe_path,
    sha256_file,
)
from loaders.format.chunks import ZstdLayout
from loaders.format.schema import OFFSETS, FormatError, Manifest, Shard, array_name
from loaders.format.spec import problems_error

CHUNK_BYTES = 16 << 20  # read at a time by the value checks (one chunk in memory: 16 MB)
PathOf = Callable[[str], Path]  # a manifest file name -> the local file (FormatError: refused)


def check_files(
    root: Path,
    manifest: Manifest,
    checksums: bool = False,
    values: bool | None = None,
    layouts: dict[int, Arrays] | None = None,
) -> list[str]:
    """check_shard's problems of every shard in `root`; `layouts` gets each one's arrays."""
    path_of = functools.partial(safe_path, Path(root))
    values = checksums if values is None else values

    def one(i: int) -> list[str]:
        found: Arrays = {}
        problems = check_shard(manifest, i, path_of, checksums=checksums, values=values, out=found)
        if layouts is not None:
            layouts[i] = found
        return problems

    shards = range(len(manifest.shards))
    if not checksums or len(shards) < 2:
        return [p for i in shards for p in one(i)]
    # Reading every byte: sha256 and numpy release the GIL, so shards check on every core
    with ThreadPoolExecutor(min(4, len(os.sched_getaffinity(0)))) as pool:
        return [p for found in pool.map(one, shards) for p in found]


def load_manifest(root: Any) -> Manifest:
    """A dataset folder's manifest, fields and files checked (FormatError: its first problems).

    Examples:
        >>> from loaders import load_manifest
        >>> manifest = load_manifest("data/demo-packed")
        >>> manifest.command, [f for f in ("image", "label", "mask") if f in manifest.fields]
        ('pack', ['image', 'label', 'mask'])
    """
    manifest = read_manifest(root)
    declared(manifest)
    problems = check_files(Path(root), manifest)
    if problems:
        raise problems_error(problems)
    return manifest


def check_shard(
    manifest: Manifest,
    index: int,
    path_of: PathOf,
    *,
    checksums: bool = False,
    values: bool = False,
    out: Arrays | None = None,
    shard: Shard | None = None,
) -> list[str]:
    """Problems of shard `index` (or `shard`, a view of it), its files found by `path_of`; `out`
    gets its checked arrays."""
    shard = manifest.shards[index] if shard is None else shard
    files: dict[str, tuple[Path, int]] = {}  # file name -> its path and byte size, checked
    found = []  # each file a regular file of its size (and sha256)
    for rel, info in shard.files.items():
        try:
            path = path_of(rel)
            st = os.stat(path)
        except FormatError as e:
            found.append(str(e))
        except OSError:
            found.append(f"{path} is missing")
        else:
            if not stat.S_ISREG(st.st_mode):
                found.append(f"{path} is not a regular file")
            elif st.st_size != info.bytes:
                found.append(f"{path} is {st.st_size} bytes, manifest says {info.bytes}")
            elif checksums and sha256_file(path) != info.sha256:
                found.append(f"{path} checksum differs from the manifest")
            else:
                files[rel] = path, st.st_size
    found += array_problems(manifest, shard)
    layouts: Arrays = {} if out is None else out
    if not found:  # the files are there and whole: read their headers
        names = [(n, n + OFFSETS) if r.offsets else (n,) for n, r in shard.arrays.items()]
        for name in (n for group in names for n in group):
            ref, spec = manifest.ref(index, name)
            path, size = files[ref.file]
            try:
                layouts[name] = path, check_array(path, ref, spec, name, size)
            except FormatError as e:
                found.append(str(e))
    if not found:
        found = array_counts(manifest, shard, layouts)
    if not found:
        found = field_problems(manifest, layouts)
    if not found and values:
        found = value_problems(manifest, shard, layouts)
    return [f"shard {index}: {p}" for p in found]


def array_problems(manifest: Manifest, shard: Shard) -> list[str]:
    """The shard's arrays against the manifest and its files' list, reading no file."""
    found = [
        f"array {name} is declared in the manifest but has no file"
        for name in sorted(set(manifest.arrays) - set(shard.arrays))
    ]
    for name, ref in shard.arrays.items():
        if name not in manifest.arrays:
            found.append(f"array {name} is not declared in the manifest")
        elif ref.file not in shard.files:
            found.append(f"array {name} is in {ref.file}, not among its files")
        elif ref.offsets is not None and ref.offsets.file not in shard.files:
            found.append(f"array {name} has offsets in {ref.offsets.file}, not among its files")
    return found


def array_counts(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """Each raw array's count, each ragged one's offsets (rising from 0 to its end) in `arrays`."""
    found = []
    for name, ref in shard.arrays.items():
        spec = manifest.arrays.get(name)
        if name not in arrays or spec is None or spec.codec == "flat":
            continue
        if ref.offsets is None:
            if ref.length != shard.count:
                found.append(f"array {name} has {ref.length} samples, the shard {shard.count}")
            continue
        if name + OFFSETS not in arrays:
            continue
        path, layout = arrays[name + OFFSETS]
        off = read_layout(path, layout).reshape(-1)
        ok = len(off) == shard.count + 1 and (not len(off) or off[0] == 0)
        # compared, not subtracted: np.diff wraps around int64 ([0, 2**63 - 1, -2] once passed)
        ok = ok and bool(np.all(off[1:] >= off[:-1]))
        if not ok or (len(off) and off[-1] != ref.length):
            found.append(
                f"{path}: the offsets of {name} are not {shard.count + 1} from 0 to its end"
            )
    return found


def field_problems(manifest: Manifest, arrays: Arrays) -> list[str]:
    """Each field's problems in one shard, reading only the arrays its check uses, once."""
    values = _Read(arrays)
    found = []
    for name, f in declared(manifest).items():
        mine = [array_name(s.field, s.size) for s in f.arrays(name)]
        if all(n in arrays for n in mine):  # each line names the field's first file
            found += [f"{arrays[mine[0]][0]}: {p}" for p in f.problems(name, values)]
    return found


class _Read(Mapping[str, np.ndarray]):
    """A shard's arrays by name, each read whole the first time a check asks for it."""

    def __init__(self, layouts: Arrays):
        self.layouts, self.read = layouts, dict[str, np.ndarray]()

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.read:
            self.read[name] = read_layout(*self.layouts[name])
        return self.read[name]

    def __contains__(self, name: object) -> bool:  # a look at the layouts: nothing is read
        return name in self.layouts

    def __iter__(self) -> Iterator[str]:
        return iter(self.layouts)

    def __len__(self) -> int:
        return len(self.layouts)


def value_problems(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """Values of one shard out of its fields' `limits`, its text not UTF-8 or its JSON not JSON."""
    fields = declared(manifest).items()
    # text and JSON fields are read as UTF-8: field (its array) -> whether it holds JSON
    strings = {name: isinstance(f, Json) for name, f in fields if isinstance(f, Text | Json)}
    limits = {a: bound for name, f in fields for a, bound in f.limits(name).items()}
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


def value_range(path: Path, layout: Layout) -> tuple[int, int] | None:
    """(smallest, largest) value of an integer array, read CHUNK_BYTES at a time (None: empty)."""
    if isinstance(layout, ZstdLayout):  # decompressed whole: a shard's array
        values = read_layout(path, layout)
        return (int(values.min()), int(values.max())) if values.size else None
    offset, dtype, shape = layout
    left = math.prod(shape)
    step = max(1, CHUNK_BYTES // dtype.itemsize)
    lows, highs = list[int](), list[int]()
    with open(path, "rb") as f:
        f.seek(offset)
        while left:
            chunk = np.fromfile(f, dtype, min(step, left))
            if len(chunk) == 0:  # shorter than checked: shrunk since
                raise OSError(f"{path} ended early")
            left -= len(chunk)
            lows.append(int(chunk.min()))
            highs.append(int(chunk.max()))
            del chunk  # before the next one is read
    return (min(lows), max(highs)) if lows else None


def string_problem(
    name: str, path: Path, layout: Layout, off: np.ndarray, json: bool
) -> str | None:
    """The first sample of ragged uint8 `name` not UTF-8 (`json`: not JSON of MAX_JSON_BYTES)."""
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
    """Each sample k as (k, bytes, whether its last), CHUNK_BYTES at a time (a long in parts)."""
    bounds, start = off.tolist(), layout[0]
    k, n = 0, len(bounds) - 1
    if isinstance(layout, ZstdLayout):  # decompressed whole: a shard's array
        data = read_layout(path, layout).tobytes()
        yield from ((i, data[bounds[i] : bounds[i + 1]], True) for i in range(n))
        return
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
