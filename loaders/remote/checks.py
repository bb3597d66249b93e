"""The folder checks (loaders.fields.checks) on a URL's local copies, naming the remote files: on a
file's arrival in the cache (`arrival_problems`), and for `prep verify URL` (`url_problems`)."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from loaders.fields import declared, field_of
from loaders.fields.checks import array_problems, check_shard
from loaders.format import FormatError, Manifest, Shard, array_name
from loaders.remote.storage import Storage, Url, name_problem

THREADS = 4  # downloads at once while verifying


def structure_problems(manifest: Manifest, url: object) -> list[str]:
    """What check_files finds without reading a file, checked when a URL is opened."""
    return [
        f"shard {i}: {p}"
        for i, s in enumerate(manifest.shards)
        for p in [name_problem(url, n) for n in s.files] + array_problems(manifest, s)
        if p
    ]


def copy_problems(
    manifest: Manifest,
    index: int,
    arrays: list[str],
    copies: dict[str, Path],
    url: Url,
    checksums: bool = False,
) -> list[str]:
    """check_shard's lines for `arrays` of shard `index`, read from `copies` (name -> path)."""
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
    view._declared = declared(manifest)  # type: ignore[attr-defined]  # the same fields
    # The view's shard lists only the files copied.
    found = check_shard(view, index, copies.__getitem__, checksums=checksums, values=checksums)
    names = sorted(((str(p), str(url / n)) for n, p in copies.items()), reverse=True)
    for path, remote in names:  # the local copies' paths -> the URLs they came from
        found = [line.replace(path, remote) for line in found]
    return found


def url_problems(
    storage: Storage, manifest: Manifest, checksums: bool, tmp_parent: Path
) -> list[str]:
    """What check_files finds in a folder, at the storage's URL (downloads under `tmp_parent`)."""

    def download(name: str, path: Path) -> None:
        with open(path, "wb") as f:
            storage.download(name, f)

    root = storage.root
    found: dict[int, list[str]] = {-1: structure_problems(manifest, root)}
    if found[-1]:
        return found[-1]
    if not root.startswith(("http://", "https://")):  # HTTP cannot list: each file's size
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
    for i, shard in enumerate(manifest.shards):
        if i in found:  # found wanting already
            continue
        with tempfile.TemporaryDirectory(dir=tmp_parent, ignore_cleanup_errors=True) as tmp:
            copies = {n: Path(tmp, f"{k:06d}") for k, n in enumerate(sorted(shard.files))}
            try:
                with ThreadPoolExecutor(THREADS) as pool:  # one request at a time waits mostly
                    list(pool.map(download, copies, copies.values()))
                arrays = sorted({*manifest.arrays, *shard.arrays})
                problems += copy_problems(manifest, i, arrays, copies, root, True)
            except FormatError as e:
                problems.append(f"shard {i}: {e}")
    return problems + _kept_problems(storage, manifest)


def _kept_problems(storage: Storage, manifest: Manifest) -> list[str]:
    """The files fields keep beside the shards (a tokenizer), against their sha256."""
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
    """The folder checks of the arrays read with file `name` of shard `index` (copied at `path`)."""
    shard = manifest.shards[index]
    held = [a for a, r in shard.arrays.items() if name in (r.file, r.offsets and r.offsets.file)]
    names: set[str] = set()
    for array in held:
        if array in manifest.arrays:
            key, field = field_of(manifest, array)
            size = manifest.arrays[array].size  # another size's pixels are not checked with it
            mine = [s for s in field.arrays(key) if size is None or s.size in (None, size)]
            names |= {array_name(s.field, s.size) for s in mine} | set(field.needs(key))
    arrays = sorted(n for n in names if n in manifest.arrays)
    refs = [shard.arrays[a] for a in arrays if a in shard.arrays]
    files = {r.file for r in refs} | {r.offsets.file for r in refs if r.offsets}
    copies = {n: fetch(n) for n in sorted(files) if n in shard.files}
    return copy_problems(manifest, index, arrays, copies | {name: path}, url)
