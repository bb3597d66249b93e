"""Checking a dataset folder against its manifest: every file, every array's header, each array's
sample count and offsets, then the checks its fields give (loaders.fields.checks)."""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from loaders.format.arrays import check_array, read_layout, safe_path, sha256_file
from loaders.format.schema import OFFSETS, FormatError, Manifest, Shard
from loaders.format.values import Arrays, value_problems

PathOf = Callable[[str], Path]  # a manifest file name -> the local file (FormatError: refused)
FieldChecks = Callable[[Manifest, Shard, Arrays], list[str]]
Limits = Callable[[Manifest], tuple[dict[str, tuple[int, str]], dict[str, bool]]]


def check_files(
    root: Path,
    manifest: Manifest,
    checksums: bool = False,
    values: bool | None = None,
    layouts: dict[int, Arrays] | None = None,
    fields: FieldChecks | None = None,
    limits: Limits | None = None,
) -> list[str]:
    """check_shard's problems of every shard, its files in `root` (empty: all good). `values`
    defaults to `checksums`: a pass that reads every byte (`prep verify`) also checks every
    value. `layouts` gets each shard's checked arrays (a store maps them as they are)."""
    path_of = functools.partial(safe_path, Path(root))
    values = checksums if values is None else values

    def one(i: int) -> list[str]:
        found: Arrays = {}
        problems = check_shard(
            manifest,
            i,
            path_of,
            checksums=checksums,
            values=values,
            out=found,
            fields=fields,
            limits=limits,
        )
        if layouts is not None:
            layouts[i] = found
        return problems

    shards = range(len(manifest.shards))
    if not checksums or len(shards) < 2:
        return [p for i in shards for p in one(i)]
    # Reading every byte: sha256 and numpy release the GIL, so shards check on every core
    with ThreadPoolExecutor(min(4, len(os.sched_getaffinity(0)))) as pool:
        return [p for found in pool.map(one, shards) for p in found]


def check_shard(
    manifest: Manifest,
    index: int,
    path_of: PathOf,
    *,
    checksums: bool = False,
    values: bool = False,
    out: Arrays | None = None,
    fields: FieldChecks | None = None,
    limits: Limits | None = None,
) -> list[str]:
    """Problems of shard `index`, whose files `path_of` finds (a folder's, or a cache's copies),
    one line each starting "shard INDEX: ": its files, byte sizes, dtypes and shapes, counts and
    offsets, then the `fields`' checks; `checksums` also recomputes sha256, and `values` reads
    every value against the fields' `limits` (loaders.format.values). `out` gets the shard's
    arrays as check_array laid them out."""
    shard = manifest.shards[index]
    files: dict[str, tuple[Path, int]] = {}  # file name -> its path and byte size, checked
    found = _file_problems(path_of, shard, checksums, files) + array_problems(manifest, shard)
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
    if not found and fields is not None:
        found = fields(manifest, shard, layouts)
    if not found and values and limits is not None:
        found = value_problems(shard, layouts, *limits(manifest))
    return [f"shard {index}: {p}" for p in found]


def _file_problems(
    path_of: PathOf, shard: Shard, checksums: bool, files: dict[str, tuple[Path, int]]
) -> list[str]:
    """Each file of the shard a regular file of its byte size (and sha256 with `checksums`);
    `files` gets the path and size of each good one."""
    found = []
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
    return found


def array_problems(manifest: Manifest, shard: Shard) -> list[str]:
    """The shard's arrays against the manifest and the shard's files, without reading a file:
    declared arrays it lacks, arrays not declared, arrays in files it does not list."""
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
    """Every raw array has the shard's count of samples; a ragged one count + 1 offsets from 0,
    never decreasing, to its data's end (a flat array is its field's to check). `arrays` may
    hold some of the shard's arrays only (a URL's, as they arrive)."""
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


def problems_error(problems: list[str]) -> FormatError:
    """One FormatError line for check_files' problems: the first three, and how many more."""
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return FormatError("; ".join(problems[:3]) + more + ". HINT: run `prep verify`, repack")
