"""Datasets at any fsspec URL: `RemoteBackend` fetches each file on first use into the node's
cache (loaders.remote.cache), checks it on arrival with the folder checks (loaders.fields.checks)
that `prep verify URL` runs on the whole, for the store to map (docs/machines.md, "Datasets on
object storage")."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loaders.fields import declared, field_of
from loaders.fields.checks import array_problems, check_shard
from loaders.format import (
    MANIFEST,
    FileInfo,
    FormatError,
    Manifest,
    Shard,
    array_name,
    problems_error,
    read_manifest,
    safe_path,
)
from loaders.format.schema import Stamp
from loaders.remote.cache import FileCache, default_cache_dir, parse_bytes, warn_small_cache

# BACKOFF is read from this module when a RemoteBackend is made: tests set it here.
from loaders.remote.storage import BACKOFF, Storage, Url, name_problem, url_of

if TYPE_CHECKING:  # torch only for a loader that follows windows, not for `prep` commands
    from loaders.remote.prefetch import Follower, WindowPlan

CHECK_EVERY = 10.0  # seconds between two looks at the remote manifest (a request each)
THREADS = 4  # downloads at once while verifying


def open_remote(root: object) -> tuple[RemoteBackend, Manifest] | None:
    """For `prep info`/`verify`: the backend and manifest of a URL `root` (None: a path)."""
    url = url_of(root)
    if url is None:
        return None
    backend = RemoteBackend(url)
    backend.read_manifest()
    assert backend._manifest is not None  # set by read_manifest: parsed once
    return backend, backend._manifest


def dataset_file(root: str | os.PathLike[str]) -> tuple[Manifest, Callable[[str, str], Path]]:
    """The manifest of a dataset at a path or URL, and (name, sha256) -> a local path."""
    remote = open_remote(root)
    if remote is None:
        return read_manifest(Path(root)), lambda name, sha256: safe_path(Path(root), name)
    return remote[1], remote[0].named_file


class RemoteBackend:
    """A dataset at a URL, read through a verified local cache (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        storage_options: dict[str, Any] | None = None,
        hold: int = 128,
    ):
        self.storage = Storage(url, storage_options, BACKOFF)
        self.root = self.storage.root
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.cache_limit = parse_bytes(cache_limit)
        self.hold = hold
        self.plan: WindowPlan | None = None  # set by follow
        self._init_process()

    def _init_process(self) -> None:
        self._files: dict[str, tuple[int, str]] = {}  # name -> (bytes, sha256)
        self._manifest: Manifest | None = None  # the one _files was read from
        self._shard_of: dict[str, int] = {}  # file name -> its shard
        self._checked_files: set[str] = set()  # checked on arrival (their arrays)
        self._shards: list[dict[str, tuple[str, int, str]]] = []  # array -> (name, bytes, sha)
        self._shard_bytes: list[int] = []  # each shard's files, in bytes
        self._array_of: dict[str, str] = {}  # file name -> an array it holds
        self._cache = FileCache(self.cache_dir, self.cache_limit, self.hold)
        self._checked: tuple[float, Stamp | None] | None = None
        self._follower: Follower | None = None
        self.windows: frozenset[int] | None = None  # the shards the store keeps mapped
        if self.plan is not None:
            from loaders.remote.prefetch import Follower

            self._follower = Follower(self.plan, self.cache_limit)

    def follow(self, order: str, seed: int, window: int) -> Callable[[int, int], None] | None:
        """For "quasi_random", what the sampler calls at each window (loaders.remote.prefetch)."""
        if not self._shards:
            self.read_manifest()
        quasi = order == "quasi_random"
        warn_small_cache(self.root, self.cache_limit, self._shard_bytes, window if quasi else 0)
        if not quasi:
            return None
        from loaders.remote.prefetch import Follower, WindowPlan

        self.plan = WindowPlan(len(self._shards), seed, window)
        self._follower = Follower(self.plan, self.cache_limit)
        return self.plan.set

    def read_manifest(self) -> tuple[bytes, Stamp]:
        stamp = self._remote_stamp()
        if stamp is None:
            raise FormatError(
                f"{self.root / MANIFEST} does not exist. HINT: check the URL (bucket and "
                "folder), and that the dataset was uploaded (its manifest.json is put last)"
            )
        data = self.storage.read(MANIFEST)
        m = self._manifest = Manifest.from_json(data, self.root / MANIFEST, self.resolver())
        self._files = {n: (f.bytes, f.sha256) for s in m.shards for n, f in s.files.items()}
        self._shard_of = {n: i for i, s in reversed(list(enumerate(m.shards))) for n in s.files}
        self._shards = [  # an array in a file its shard does not list: refused at open
            {a: (r.file, *self._files[r.file]) for a, r in s.refs().items() if r.file in s.files}
            for s in m.shards
        ]
        self._array_of = {f[0]: a for arrays in self._shards for a, f in arrays.items()}
        self._checked = time.monotonic(), stamp
        self._shard_bytes = [sum(f.bytes for f in s.files.values()) for s in m.shards]
        return data, stamp

    def _remote_stamp(self) -> Stamp | None:
        info = self.storage.info(MANIFEST)
        if info is None:
            return None
        tag = str(info.get("ETag") or info.get("etag") or info.get("LastModified") or "")
        digest = int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=7).digest(), "big")
        return 0, 0, int(info.get("size") or 0), digest

    def manifest_stamp(self) -> Stamp | None:
        """The remote manifest's size and ETag, at most every CHECK_EVERY s (else the last)."""
        now = time.monotonic()
        if self._checked is None or now - self._checked[0] >= CHECK_EVERY:
            last = self._checked[1] if self._checked else None
            try:
                self._checked = now, self._remote_stamp()
            except OSError:
                self._checked = now, last
        if self._follower is not None:  # looked at once a batch: follow the sampler too
            moved = self._follower.follow(self._shards, self.local_path)
            if moved is not None:
                self._cache.rank, held, self.windows = moved
                self._cache.hold_only(held)
        return self._checked[1]

    def local_path(self, name: str) -> Path:
        """The cached copy of `name`, fetched (once per node) if needed."""
        if not self._files:
            self.read_manifest()
        if name not in self._files:
            raise FormatError(f"{self.root}: manifest path {name!r} is not a listed file")
        if self._follower is not None:  # learn which arrays the dataset reads
            self._follower.read.add(self._array_of[name])
        path = self._cached(name, *self._files[name])
        if name not in self._checked_files:  # the arrays read with it: checked before first use
            assert self._manifest is not None  # read with _files
            i, fetch = self._shard_of[name], lambda n: self._cached(n, *self._files[n])
            problems = arrival_problems(self._manifest, i, name, path, fetch, self.root)
            if problems:
                raise problems_error(problems)
            self._checked_files.add(name)
        return path

    def _cached(self, name: str, size: int, sha256: str) -> Path:
        url = self.storage.url(name)  # refuses a name that leaves the dataset
        return self._cache.get(sha256, size, url, lambda f: self.storage.download(name, f))

    def resolver(self) -> Callable[[str, FileInfo], Path]:
        """The shard index's files, fetched into the cache and checked like a shard's."""

        def resolve(name: str, info: FileInfo) -> Path:
            path = self._cached(name, info.bytes, info.sha256)
            self._cache.pin(info.sha256)  # mapped for the whole run: never evicted under it
            return path

        return resolve

    def named_file(self, name: str, sha256: str) -> Path:
        """A file the manifest names beside its shards (a tokenizer), cached and checked."""
        return self._cached(name, self.storage.size(name), sha256)

    def problems(self, manifest: Manifest, checksums: bool = False) -> list[str]:
        """check_files' lines for the URL (`prep verify` downloads into the cache's folder)."""
        storage = self.storage

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
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        for i, shard in enumerate(manifest.shards):
            if i in found:  # found wanting already
                continue
            with tempfile.TemporaryDirectory(dir=self.cache_dir, ignore_cleanup_errors=True) as tmp:
                copies = {n: Path(tmp, f"{k:06d}") for k, n in enumerate(sorted(shard.files))}
                try:
                    with ThreadPoolExecutor(THREADS) as pool:  # one request at a time waits mostly
                        list(pool.map(download, copies, copies.values()))
                    arrays = sorted({*manifest.arrays, *shard.arrays})
                    problems += copy_problems(manifest, i, arrays, copies, root, True)
                except FormatError as e:
                    problems.append(f"shard {i}: {e}")
        return problems + _kept_problems(storage, manifest)

    def __getstate__(self) -> dict[str, Any]:
        keep = ("storage", "root", "cache_dir", "cache_limit", "hold", "plan")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_process()


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
    shard = manifest.shards[index]  # viewed: its arrays `arrays`, its files those copied
    viewed = Shard(
        shard.count,
        {a: shard.arrays[a] for a in arrays if a in shard.arrays},
        {n: shard.files[n] for n in copies if n in shard.files},
        shard.split,
    )
    specs = {a: manifest.arrays[a] for a in arrays if a in manifest.arrays}
    view = dataclasses.replace(manifest, arrays=specs)
    view._declared = declared(manifest)  # type: ignore[attr-defined]  # the same fields
    # One shard, not the list: an index holds a million shards, and files arrive one by one.
    found = check_shard(
        view, index, copies.__getitem__, checksums=checksums, values=checksums, shard=viewed
    )
    names = sorted(((str(p), str(url / n)) for n, p in copies.items()), reverse=True)
    for path, remote in names:  # the local copies' paths -> the URLs they came from
        found = [line.replace(path, remote) for line in found]
    return found


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
