"""The folder checks of loaders.format, run on a remote dataset's local copies: the same code and
the same lines for a URL as for a folder, with the URL's file names in them.

`check_shard` checks one shard whose files a function finds. A URL's files are in the cache
(`files/XX/SHA256`) as they arrive for reading, or in a temporary folder for `prep verify`; the
lines name the remote files again.

- Reading: when a file arrives, the arrays checked together with it (`checked_with`: the arrays
  it holds and their sides; a token or volume shard whole) are checked on their cached copies
  before the first read (`RemoteBackend.local_path`), in the process that reads it.
- `prep verify URL`: every file of a shard is downloaded to a temporary folder in the cache's
  folder, checked with checksums and values like a folder's, and deleted.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from loaders.fields import declared, field_of
from loaders.fields.checks import field_problems, value_limits
from loaders.format import FormatError, Manifest, Shard, array_name
from loaders.format.checks import array_problems, check_shard
from loaders.remote.storage import Storage, Url, name_problem

THREADS = 4  # downloads at once while verifying


def structure_problems(manifest: Manifest, url: object) -> list[str]:
    """What check_files finds without reading a file: file names that leave the dataset,
    declared arrays without a file, arrays in files the shard does not list. Checked when a URL
    is opened (a KeyError or a read elsewhere later, else)."""
    found = [
        f"shard {i}: {p}"
        for i, s in enumerate(manifest.shards)
        for p in [name_problem(url, n) for n in s.files] + array_problems(manifest, s)
        if p
    ]
    return found


def checked_with(manifest: Manifest, shard: int, file: str) -> list[str]:
    """The arrays whose checks need file `file` of shard `shard`: the arrays of the fields that
    store one in it (at its size), and the arrays of other fields their checks read
    (Field.needs: an image's sides for its masks). Only what is read is fetched."""
    refs = manifest.shards[shard].arrays
    held = [a for a, r in refs.items() if file in (r.file, r.offsets and r.offsets.file)]
    names: set[str] = set()
    for array in held:
        if array in manifest.arrays:
            name, field = field_of(manifest, array)
            size = manifest.arrays[array].size  # another size's pixels are not checked with it
            mine = [s for s in field.arrays(name) if size is None or s.size in (None, size)]
            names |= {array_name(s.field, s.size) for s in mine}
            names |= set(field.needs(name))
    return sorted(n for n in names if n in manifest.arrays)


def files_of(shard: Shard, arrays: list[str]) -> list[str]:
    """The files holding `arrays` (and their offsets) in `shard`, as it lists them."""
    refs = [shard.arrays[a] for a in arrays if a in shard.arrays]
    names = {r.file for r in refs} | {r.offsets.file for r in refs if r.offsets}
    return sorted(n for n in names if n in shard.files)


def copy_problems(
    manifest: Manifest,
    index: int,
    arrays: list[str],
    copies: dict[str, Path],
    url: Url,
    checksums: bool = False,
) -> list[str]:
    """check_shard's lines for `arrays` of shard `index`, read from `copies` (the shard's file
    names -> local copies), naming the files at `url`; `checksums` also checks every value
    against the manifest, as `prep verify` does for a folder."""
    shard = manifest.shards[index]
    shards = list(manifest.shards)
    shards[index] = Shard(
        shard.count,
        {a: shard.arrays[a] for a in arrays if a in shard.arrays},
        {n: shard.files[n] for n in copies if n in shard.files},
        shard.split,
    )
    specs = {a: manifest.arrays[a] for a in arrays if a in manifest.arrays}
    view = dataclasses.replace(manifest, arrays=specs, shards=shards)

    def path_of(name: str) -> Path:
        if name not in copies:  # listed in the shard, so fetched: never, but not a KeyError
            raise FormatError(f"{url / name} was not fetched")
        return copies[name]

    view._declared = declared(manifest)  # type: ignore[attr-defined]  # the same fields
    found = check_shard(
        view,
        index,
        path_of,
        checksums=checksums,
        values=checksums,
        fields=field_problems,
        limits=value_limits,
    )
    names = sorted(((str(p), str(url / n)) for n, p in copies.items()), reverse=True)
    out = []
    for line in found:  # the local copies' paths -> the URLs they came from
        for path, remote in names:
            line = line.replace(path, remote)
        out.append(line)
    return out


def verify_shards(
    manifest: Manifest, storage: Storage, tmp_parent: Path, skip: set[int]
) -> list[str]:
    """`prep verify`'s checks of every shard at the storage's URL: its files downloaded into a
    temporary folder under `tmp_parent`, checked as a folder's are (checksums, headers, the
    kind's checks), then deleted. Shards in `skip` (found wanting already) are not
    downloaded."""

    def download(name: str, path: Path) -> None:
        with open(path, "wb") as f:
            storage.download(name, f)

    problems: list[str] = []
    for i, shard in enumerate(manifest.shards):
        if i in skip:
            continue
        tmp = tmp_parent / f"verify-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir(parents=True)
        try:
            copies = {n: tmp / f"{k:06d}" for k, n in enumerate(sorted(shard.files))}
            with ThreadPoolExecutor(THREADS) as pool:  # one request at a time waits mostly
                list(pool.map(download, copies, copies.values()))
            arrays = sorted({*manifest.arrays, *shard.arrays})
            problems += copy_problems(manifest, i, arrays, copies, storage.root, checksums=True)
        except FormatError as e:
            problems.append(f"shard {i}: {e}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return problems


def url_problems(
    storage: Storage, manifest: Manifest, checksums: bool, tmp_parent: Path
) -> list[str]:
    """What check_files finds in a folder, found at the storage's URL: the shards' arrays
    against their files, files missing remotely or of another byte size; with `checksums`
    (`prep verify`), every file downloaded (under `tmp_parent`) and checked as a folder's
    files are (checksums, headers, the kind's checks) and the tokenizer's checksum."""
    root = storage.root
    found = {-1: structure_problems(manifest, root)}
    if found[-1]:
        return found[-1]
    if storage.lists:
        have = storage.listing()
    else:
        have = {n: storage.size(n) for s in manifest.shards for n in s.files}
    for i, shard in enumerate(manifest.shards):
        for name, info in shard.files.items():
            if name not in have:
                found.setdefault(i, []).append(f"shard {i}: {root / name} is missing")
            elif have[name] != info.bytes:
                found.setdefault(i, []).append(
                    f"shard {i}: {root / name} has {have[name]} bytes, the manifest says "
                    f"{info.bytes}"
                )
    problems = [p for lines in found.values() for p in lines]
    if not checksums:
        return problems
    tmp_parent.mkdir(parents=True, exist_ok=True)
    problems += verify_shards(manifest, storage, tmp_parent, set(found))
    return problems + _kept_problems(storage, manifest)


def _kept_problems(storage: Storage, manifest: Manifest) -> list[str]:
    """The files fields keep beside the shards (a tokenizer), checked as `prep verify` checks a
    folder's."""
    found = []
    for name, field in declared(manifest).items():
        for file, sha256 in field.files(name).items():
            url = storage.root / file
            try:
                same = storage.sha256(file) == sha256
            except FormatError as e:
                gone = "does not exist" in str(e)
                found.append(f"{name}: {url} is missing" if gone else f"{name}: {e}")
                continue
            if not same:
                found.append(f"{name}: {url} checksum differs from the manifest")
    return found


def arrival_problems(
    manifest: Manifest, index: int, name: str, path: Path, fetch: Callable[[str], Path], url: Url
) -> list[str]:
    """The folder checks of the arrays read with file `name` of shard `index` (its copy at
    `path`), the other files they need fetched (`fetch(name)`: a cached copy)."""
    arrays = checked_with(manifest, index, name)
    copies = {n: fetch(n) for n in files_of(manifest.shards[index], arrays)}
    return copy_problems(manifest, index, arrays, copies | {name: path}, url)
