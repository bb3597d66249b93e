"""Datasets on object storage: any fsspec URL (s3://, gs://, http(s)://, file://).

`RemoteBackend` is the shard store's backend for a URL: it reads the manifest, then fetches each
shard file on first use into a local cache shared by every process of the node
(loaders.remote.cache), verified against the manifest's size and sha256, and hands the store
the cached file to map. Credentials come from fsspec's own configuration (environment,
profiles); `storage_options` passes through to the file system. fsspec is imported only for
a URL (loaders.remote.fs).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from loaders.format import MANIFEST, FormatError, Manifest, problems_error, read_manifest, safe_path
from loaders.remote.cache import CHUNK, FileCache, default_cache_dir, parse_bytes, warn_small_cache
from loaders.remote.checks import arrival_problems, name_problem, url_problems
from loaders.remote.fs import Url, filesystem, url_of

if TYPE_CHECKING:  # torch only for a loader that follows windows, not for `prep` commands
    from loaders.remote.prefetch import Follower, WindowPlan

__all__ = ["RemoteBackend", "Url", "dataset_file", "filesystem", "open_remote", "retried", "url_of"]
T = TypeVar("T")
RETRIES = 4  # tries of one read before it fails
BACKOFF = 0.5  # seconds before the second try, doubling after each
CHECK_EVERY = 10.0  # seconds between two looks at the remote manifest (a request each)

Stamp = tuple[int, int, int, int]
FileAt = Callable[[str, str], Path]  # (name, sha256) -> a local path of that file


def retried(what: str, fn: Callable[[], T], tries: int | None = None) -> T:
    """`fn()`, tried again with backoff on a network error; then one OSError naming `what`.
    A missing file or refused credentials fail at once (FormatError): trying again cannot help."""
    tries = tries or RETRIES
    for attempt in range(tries):
        try:
            return fn()
        except FileNotFoundError as e:
            if not _network(e):
                raise FormatError(
                    f"{what} does not exist. HINT: check the URL (bucket and folder), and "
                    "that the dataset was uploaded (its manifest.json is put last)"
                ) from None
            error: Exception = e
        except PermissionError as e:
            raise FormatError(
                f"{what}: access refused ({e}). HINT: check the credentials fsspec finds "
                "(environment, profile) or pass storage_options="
            ) from None
        except FormatError:
            raise
        except Exception as e:  # fsspec implementations raise their own network errors
            error = e
        if attempt + 1 == tries:
            cause = error.__cause__ or error
            raise OSError(
                f"{what}: cannot read it after {tries} tries ({type(cause).__name__}: {cause}). "
                "HINT: check the network and the server; the cache keeps what was fetched"
            ) from error
        time.sleep(BACKOFF * 2**attempt)
    raise AssertionError("unreachable")


def _network(e: FileNotFoundError) -> bool:
    """fsspec's HTTP file system reports a refused connection as FileNotFoundError, caused by
    the network error: that one is worth trying again."""
    cause = e.__cause__
    return isinstance(cause, (OSError, TimeoutError)) and not isinstance(cause, FileNotFoundError)


def open_remote(root: object) -> tuple[RemoteBackend, Manifest] | None:
    """For `prep info`/`verify`: the backend and manifest of a URL `root` (None: a path)."""
    url = url_of(root)
    if url is None:
        return None
    backend = RemoteBackend(url)
    data, _ = backend.read_manifest()
    return backend, Manifest.from_json(data, backend.root / MANIFEST)


def dataset_file(root: str | os.PathLike[str], kind: str) -> tuple[Manifest, FileAt]:
    """The manifest of a dataset of `kind` at a path or URL, and a function giving a local
    path of one of its files by name and sha256 (at a URL: fetched into the cache, checked)."""
    remote = open_remote(root)
    m = remote[1] if remote else read_manifest(Path(root))
    if m.kind != kind:
        raise FormatError(f"{root} holds {m.kind}, not {kind}")
    if remote is None:
        return m, lambda name, sha256: safe_path(Path(root), name)
    return m, remote[0].named_file


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
        self.root = Url(url)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.cache_limit = parse_bytes(cache_limit)
        self.storage_options = storage_options or {}
        self.hold = hold
        self.plan: WindowPlan | None = None  # set by follow
        self._init_process()

    def _init_process(self) -> None:
        self._fs: Any = None
        self._fs_pid = 0
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
        """The sampler's order, told by it (make_loader): for "quasi_random", share its position
        with every process reading this dataset (loaders.remote.prefetch) and return what the
        sampler calls at each window. Warns if cache_limit is below what the order keeps in use."""
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

    @property
    def fs(self) -> Any:
        # fsspec's async file systems (s3, http) refuse to run in a forked child, such as a
        # DataLoader worker: each process makes its own.
        if self._fs is None or self._fs_pid != os.getpid():
            self._fs, self._fs_pid = filesystem(self.root, self.storage_options), os.getpid()
        return self._fs

    def read_manifest(self) -> tuple[bytes, Stamp]:
        url = self.root / MANIFEST
        stamp = self._remote_stamp()
        if stamp is None:
            raise FormatError(
                f"{url} does not exist. HINT: check the URL (bucket and folder), and that the "
                "dataset was uploaded (its manifest.json is put last)"
            )
        data: bytes = retried(url, lambda: self.fs.cat_file(url))
        m = self._manifest = Manifest.from_json(data, url)
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
        url = self.root / MANIFEST
        try:
            info = retried(url, lambda: self.fs.info(url))
        except FormatError as e:
            if "does not exist" in str(e):
                return None
            raise
        tag = str(info.get("ETag") or info.get("etag") or info.get("LastModified") or "")
        digest = int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=7).digest(), "big")
        return 0, 0, int(info.get("size") or 0), digest

    def manifest_stamp(self) -> Stamp | None:
        """The remote manifest's size and ETag, looked at most every CHECK_EVERY seconds. When
        the look fails (the network), the last one stands: cached files keep reading."""
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
                self._cache.rank, self.windows = moved.rank, moved.shards
                self._cache.hold_only(moved.files)
        return self._checked[1]

    def local_path(self, name: str) -> Path:
        """The cached copy of `name`, fetched (once per node) if needed."""
        if not self._files:
            self.read_manifest()
        if name not in self._files:
            raise FormatError(f"{self.root}: manifest path {name!r} is not a listed file")
        if self._follower is not None:  # learn which arrays the dataset reads
            self._follower.read.add(self._array_of[name])
        path = self._fetch(name)
        if name not in self._checked_files:
            self._check_arrival(name, path)
        return path

    def _fetch(self, name: str) -> Path:
        size, sha256 = self._files[name]
        url = self.url(name)
        return self._cache.get(sha256, size, url, lambda f: self._download(url, f))

    def _check_arrival(self, name: str, path: Path) -> None:
        """The folder checks of the arrays read with `name`, on their cached copies, before
        its first use in this process (loaders.remote.checks); FormatError naming the file."""
        assert self._manifest is not None  # read with _files
        i = self._shard_of[name]
        problems = arrival_problems(self._manifest, i, name, path, self._fetch, self.root)
        if problems:
            raise problems_error(problems)
        self._checked_files.add(name)

    def _download(self, url: str, dst: BinaryIO) -> None:
        def once() -> None:
            dst.seek(0)
            dst.truncate()
            with self.fs.open(url, "rb", block_size=CHUNK) as src:
                while chunk := src.read(CHUNK):
                    dst.write(chunk)

        retried(url, once)

    def listing(self) -> dict[str, int]:
        """Remote file name -> byte size, for the files under the dataset's URL."""
        found = retried(self.root, lambda: self.fs.find(self.root, detail=True))
        base = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        return {p[len(base) :]: int(i.get("size") or 0) for p, i in found.items()}

    def named_file(self, name: str, sha256: str) -> Path:
        """A file the manifest names beside its shards (a tokenizer), fetched into the cache
        and checked against `sha256` as a shard file is."""
        url = self.url(name)
        return self._cache.get(sha256, self._size(name), url, lambda f: self._download(url, f))

    def _size(self, name: str) -> int:
        url = self.url(name)
        return int(retried(url, lambda: self.fs.size(url)))

    def problems(self, manifest: Manifest, checksums: bool = False) -> list[str]:
        """check_files' lines for the URL (loaders.remote.checks.url_problems)."""
        return url_problems(self, manifest, checksums)

    def url(self, name: str) -> Url:
        """The URL of the dataset's file `name`; a name that would leave the dataset (`..`, a
        query) is refused."""
        problem = name_problem(self.root, name)
        if problem:
            raise FormatError(f"{problem}. HINT: the manifest was edited or damaged: repack")
        return self.root / name

    def download_to(self, name: str, path: Path) -> None:
        with open(path, "wb") as f:
            self._download(self.url(name), f)

    def __getstate__(self) -> dict[str, Any]:
        keep = ("root", "cache_dir", "cache_limit", "storage_options", "hold", "plan")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_process()
