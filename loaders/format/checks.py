"""Checking a dataset folder against its manifest: every file, every array's header, then the
checks of the manifest's kind (SHARD_CHECKS: sample counts, labels against classes, token and
voxel offsets, foreground indices)."""

from __future__ import annotations

import functools
import itertools
import math
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from loaders.format.arrays import (
    check_array,
    read_layout,
    read_manifest,
    safe_path,
    sha256_file,
)
from loaders.format.schema import OFFSETS, FormatError, Manifest, Shard, array_name
from loaders.format.values import Arrays, value_problems

PathOf = Callable[[str], Path]  # a manifest file name -> the local file (FormatError: refused)


def check_files(
    root: Path,
    manifest: Manifest,
    checksums: bool = False,
    values: bool | None = None,
    layouts: dict[int, Arrays] | None = None,
) -> list[str]:
    """Problems found in the folder, one line each naming the shard and the file or array at
    fault (empty: all good): check_shard of every shard, its files in `root`.

    `values` defaults to `checksums`: a pass that reads every byte (`prep verify`) also checks
    every value against the manifest. `layouts` gets each shard's checked arrays (a store maps
    them without reading their headers again)."""
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


def check_shard(
    manifest: Manifest,
    index: int,
    path_of: PathOf,
    *,
    checksums: bool = False,
    values: bool = False,
    out: Arrays | None = None,
) -> list[str]:
    """Problems of shard `index`, whose files `path_of` finds (a folder's, or a cache's copies),
    one line each starting "shard INDEX: ".

    Always checks that every declared array has a file listed in the shard, presence, byte
    sizes, dtypes and shapes, then the checks of the manifest's kind (SHARD_CHECKS);
    `checksums` also recomputes sha256, and `values` reads every value against the manifest
    (loaders.format.values: token ids, table and target codes; chunked, bounded memory).
    `out` gets the shard's arrays as check_array laid them out."""
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
        found = SHARD_CHECKS[manifest.kind](manifest, shard, layouts)
    if not found and values:
        found = value_problems(manifest, shard, layouts)
    return [f"shard {index}: {p}" for p in found]


def _file_problems(
    path_of: PathOf, shard: Shard, checksums: bool, files: dict[str, tuple[Path, int]]
) -> list[str]:
    """Each file of the shard: a regular file of the manifest's byte size (and sha256 with
    `checksums`); `files` gets the path and size of each good one."""
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


def _check_images(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """Every array has the shard's count of samples; labels index `classes` (read whole: a
    few bytes a sample)."""
    found = [
        f"array {name} has {ref.length} samples, the shard {shard.count}"
        for name, ref in shard.arrays.items()
        if ref.offsets is None and ref.length != shard.count
    ]
    found += [
        p
        for name, ref in shard.arrays.items()
        if ref.offsets is not None
        for p in _ragged_problems(manifest, name, shard.count, ref.length, arrays)
    ]
    if found or "label" not in arrays or manifest.classes is None or not shard.count:
        return found
    path, layout = arrays["label"]
    top, n = int(read_layout(path, layout).max()), len(manifest.classes)
    return [f"{path}: label {top} is not one of the {n} classes"] if top >= n else []


def _ragged_problems(
    manifest: Manifest, name: str, count: int, length: int, arrays: Arrays
) -> list[str]:
    """A ragged or jpeg image array: count + 1 offsets from 0, never decreasing, up to its
    data's length; with `hw_{size}` (mode keep) sides of 1..size, and raw samples of h * w * C
    elements (read whole: 8 bytes a sample)."""
    spec, (path, layout) = manifest.arrays[name], arrays[name + OFFSETS]
    off = read_layout(path, layout)
    if len(off) != count + 1 or (count and (off[0] != 0 or not _rising(off))):
        return [f"{path}: the offsets of {name} are not {count + 1} from 0, never decreasing"]
    if off[-1] != length:  # the data's length, checked against its file already
        return [f"{path}: the offsets of {name} end at {off[-1]}, not at its data's end"]
    hw_name = array_name("hw", spec.size)
    if spec.size is None:  # a size-free field (source paths): bytes of any length
        return []
    if hw_name not in arrays:
        return (
            [f"array {name} is ragged raw, which needs {hw_name}"] if spec.codec == "ragged" else []
        )
    hw = read_layout(*arrays[hw_name]).astype(np.int64)
    if len(hw) and (hw.min() < 1 or hw.max() > (spec.size or 0)):
        return [f"{arrays[hw_name][0]}: a side is not 1..{spec.size} px"]
    channels = spec.shape[2] if len(spec.shape) == 3 else 1
    if spec.codec == "ragged" and not np.array_equal(np.diff(off), hw[:, 0] * hw[:, 1] * channels):
        return [f"{path}: the offsets of {name} do not step by each sample's h * w * {channels}"]
    return []


def _rising(off: np.ndarray) -> bool:
    """Whether int64 offsets never decrease: compared, not subtracted (np.diff wraps around
    int64, and [0, 2**63 - 1, -2, 5] once passed as never decreasing).

    >>> _rising(np.array([0, 2**63 - 1, -2, 5])), _rising(np.array([0, 0, 3]))
    (False, True)
    """
    return bool(np.all(off[1:] >= off[:-1]))


def _check_offsets(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """A token shard's document offsets: count + 1 of them, from 0, never decreasing, up to
    the shard's token count (read whole: 8 bytes a document)."""
    if "doc_offsets" not in arrays or "tokens" not in arrays:
        return ["a token shard needs arrays tokens and doc_offsets"]
    off = read_layout(*arrays["doc_offsets"]).reshape(-1)
    ok = (
        len(off) == shard.count + 1
        and off[0] == 0
        and off[-1] == shard.arrays["tokens"].length
        and _rising(off)
    )
    return [] if ok else ["doc_offsets do not run from 0 to its token count"]


def _check_volumes(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """A volume shard: `count` shapes, `count + 1` voxel offsets from 0 that step by each
    volume's voxel count up to the voxels' length, labels as long as the voxels, and a
    foreground index inside its volumes (read whole: a few bytes a volume and indexed voxel)."""
    n, length = shard.count, {name: ref.length for name, ref in shard.arrays.items()}
    if "voxels" not in arrays or "volume_shape" not in arrays or "voxel_offsets" not in arrays:
        return ["a volume shard needs arrays voxels, volume_shape and voxel_offsets"]
    if length["volume_shape"] != n or length["voxel_offsets"] != n + 1:
        return [f"volume_shape and voxel_offsets do not hold {n} volumes"]
    # Python ints: three uint32 sides overflow int64, and a size wrapped negative once let
    # negative offsets pass (a read then returned another volume's voxels).
    sizes = [math.prod(s) for s in read_layout(*arrays["volume_shape"]).tolist()]
    off = read_layout(*arrays["voxel_offsets"]).tolist()
    steps = [b - a for a, b in itertools.pairwise(off)]
    if off[0] != 0 or steps != sizes or off[-1] != length["voxels"]:
        return ["voxel_offsets do not step by the volumes' sizes up to the voxel count"]
    if "label_voxels" in length and length["label_voxels"] != length["voxels"]:
        return ["label_voxels and voxels differ in length"]
    targets = [k for k in length if k.startswith("volume_target")]
    if any(length[k] != n for k in targets):  # one value per volume (a --targets column)
        return [f"a volume_target array does not hold {n} values"]
    if "fg_offsets" not in arrays or not n:
        return []
    bounds = read_layout(*arrays["fg_offsets"])
    fg = read_layout(*arrays["fg_voxels"])
    ok = length["fg_offsets"] == n and bool(np.all(bounds[:, 1:] >= bounds[:, :-1]))
    ok = ok and bounds[0, 0] == 0 and bounds[-1, -1] == len(fg)
    ok = ok and bool(np.all(bounds[1:, 0] == bounds[:-1, -1]))
    if not ok:
        return ["fg_offsets do not bound each volume's classes in fg_voxels"]
    tops = [int(fg[a:b].max()) for a, b in zip(bounds[:, 0], bounds[:, -1], strict=True) if b > a]
    used = [int(s) for s, a, b in zip(sizes, bounds[:, 0], bounds[:, -1], strict=True) if b > a]
    ok = all(t < s for t, s in zip(tops, used, strict=True))
    return [] if ok else ["fg_voxels hold a voxel outside its volume"]


# The checks of one shard that depend on the manifest's kind, run once its headers are good.
def _check_samples(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    from loaders.fields.checks import check_samples  # the field kinds import this package

    return check_samples(manifest, shard, arrays)


SHARD_CHECKS: dict[str, Callable[[Manifest, Shard, Arrays], list[str]]] = {
    "images": _check_images,
    "tokens": _check_offsets,
    "volumes": _check_volumes,
    "table": _check_images,  # every column has the shard's count of rows
    "samples": _check_samples,
}


def problems_error(problems: list[str]) -> FormatError:
    """One FormatError line for check_files' problems: the first three, and how many more."""
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return FormatError("; ".join(problems[:3]) + more + ". HINT: run `prep verify`, repack")


def load_manifest(root: str | os.PathLike[str]) -> Manifest:
    """Read and validate a dataset folder; raise FormatError naming the first problems."""
    manifest = read_manifest(root)
    problems = check_files(Path(root), manifest)
    if problems:
        raise problems_error(problems)
    return manifest
