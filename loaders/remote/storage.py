"""Object storage: the one place that talks to a URL, for reading a dataset (loaders.remote) and
for writing one (prep.run.remote). Every request is retried on a network error, then fails in
one OSError or FormatError that names the URL and the fix."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from loaders.format.spec import FormatError

T = TypeVar("T")
RETRIES = 4  # tries of one request before it fails
BACKOFF = 0.5  # seconds before the second try, doubling after each
CHUNK = 1 << 22  # bytes a read while streaming a file

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/+(.*)$")
_PART = re.compile(r"[^/\\\0?#%]+")  # no separators, queries, fragments or %-escapes


def url_of(root: object) -> str | None:
    """The URL `root` names (one folded by `Path` into `s3:/b` mended), or None for a path."""
    m = _URL.match(os.fspath(root) if isinstance(root, os.PathLike) else str(root))
    if not m or len(m.group(1)) < 2:  # one letter: a Windows drive, not a scheme
        return None
    scheme, rest = m.group(1).lower(), m.group(2).rstrip("/")
    return f"file:///{rest}" if scheme == "file" else f"{scheme}://{rest}"


class Url(str):
    """A URL that joins like a Path: `Url('s3://b/ds') / 'manifest.json'`."""

    def __truediv__(self, name: str) -> Url:
        return Url(f"{self.rstrip('/')}/{name}")

    @property
    def name(self) -> str:
        return self.rstrip("/").rsplit("/", 1)[-1]


def name_problem(url: object, name: object) -> str | None:
    """Why a file name may not be joined to the dataset's URL (`..`, a query...), or None."""
    parts = name.split("/") if isinstance(name, str) else [""]
    if all(_PART.fullmatch(p) and p not in (".", "..") for p in parts):
        return None
    return f"manifest path {str(name)[:80]!r} escapes the dataset {url}"


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> Any:
    """The fsspec file system of `url` (fsspec imported here, on first use)."""
    try:
        import fsspec
    except ImportError as e:
        raise FormatError(
            f"{url}: reading a URL needs fsspec. HINT: pip install fsspec (and s3fs for s3://, "
            "gcsfs for gs://, aiohttp for http://)"
        ) from e
    try:
        # No listings cache: a file replaced remotely (a repack) must not be read with the
        # size and ETag seen before; an instance of its own per backend and process.
        options = {"use_listings_cache": False, "skip_instance_cache": True}
        if url.startswith("file:"):  # folders exist on disk (a bucket's keys need none)
            options["auto_mkdir"] = True
        fs, _ = fsspec.core.url_to_fs(url, **(options | (storage_options or {})))
    except (ImportError, ValueError) as e:
        raise FormatError(
            f"{url}: no file system for it ({e}). HINT: pip install 'prep[s3]' for s3://"
        ) from e
    return fs


def retried(
    what: str,
    fn: Callable[[], T],
    tries: int | None = None,
    backoff: float | None = None,
    doing: str = "read",
) -> T:
    """`fn()`, tried again with backoff on a network error, then one OSError naming `what`; a
    missing file or refused credentials fail at once (FormatError): trying again cannot help."""
    tries, backoff = tries or RETRIES, BACKOFF if backoff is None else backoff
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
                f"{what}: cannot {doing} it after {tries} tries ({type(cause).__name__}: "
                f"{cause}). HINT: check the network and the server"
                + ("; the cache keeps what was fetched" if doing == "read" else "")
            ) from error
        time.sleep(backoff * 2**attempt)
    raise AssertionError("unreachable")


def _network(e: FileNotFoundError) -> bool:
    """fsspec's HTTP reports a refused connection as FileNotFoundError caused by a network error."""
    cause = e.__cause__
    return isinstance(cause, (OSError, TimeoutError)) and not isinstance(cause, FileNotFoundError)


def _or_none(fn: Callable[[Url], T]) -> Callable[[Url], T | None]:
    """fn, giving None where the file does not exist (not for a network error: see _network)."""

    def call(url: Url) -> T | None:
        try:
            return fn(url)
        except FileNotFoundError as e:
            if _network(e):
                raise
            return None

    return call


class Storage:
    """A folder at a URL, its files by name. Each process makes its own file system: fsspec's
    async ones (s3, http) refuse to run in a forked child (a DataLoader worker)."""

    def __init__(
        self, url: str, storage_options: dict[str, Any] | None = None, backoff: float | None = None
    ):
        self.root = Url(url)
        self.storage_options = storage_options or {}
        self.backoff = backoff  # None: this module's BACKOFF
        self._fs: Any = None
        self._pid = 0

    @property
    def fs(self) -> Any:
        if self._fs is None or self._pid != os.getpid():
            self._fs, self._pid = filesystem(self.root, self.storage_options), os.getpid()
        return self._fs

    def url(self, name: str) -> Url:
        """The URL of file `name`; one that would leave the folder (`..`, a query) is refused."""
        problem = name_problem(self.root, name)
        if problem:
            raise FormatError(f"{problem}. HINT: the manifest was edited or damaged: repack")
        return self.root / name

    def _request(self, name: str, fn: Callable[[Url], T], doing: str = "read") -> T:
        """fn(the URL of file `name`), retried."""
        url = self.url(name)
        return retried(url, lambda: fn(url), RETRIES, self.backoff, doing)

    def listing(self) -> dict[str, int]:
        """File name -> byte size, for every file under the folder."""
        found = retried(
            self.root, lambda: self.fs.find(self.root, detail=True), RETRIES, self.backoff
        )
        base = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        return {p[len(base) :]: int(i.get("size") or 0) for p, i in found.items()}

    def info(self, name: str) -> dict[str, Any] | None:
        """fsspec's info of file `name` (its size, ETag...); None when there is no such file."""
        return self._request(name, _or_none(lambda url: dict(self.fs.info(url))))

    def size(self, name: str) -> int:
        return int(self._request(name, lambda url: self.fs.size(url)))

    def read(self, name: str) -> bytes:
        """The whole of file `name` (a manifest: small)."""
        return bytes(self._request(name, lambda url: self.fs.cat_file(url)))

    def download(self, name: str, dst: BinaryIO) -> None:
        """File `name` streamed into `dst` (from its start again on each try)."""

        def once(url: Url) -> None:
            dst.seek(0)
            dst.truncate()
            with self.fs.open(url, "rb", block_size=CHUNK) as src:
                shutil.copyfileobj(src, dst, CHUNK)

        self._request(name, once)

    def sha256(self, name: str) -> str:
        """The sha256 of file `name`, streamed (nothing kept)."""

        def once(url: Url) -> str:
            with self.fs.open(url, "rb", block_size=CHUNK) as src:
                return hashlib.file_digest(src, "sha256").hexdigest()

        return self._request(name, once)

    def put(self, local: Path, name: str) -> None:
        """The local file up as `name`: one PUT, or a multipart upload shown once complete."""
        self._request(name, lambda url: self.fs.put_file(str(local), url), "write")

    def write(self, name: str, data: bytes) -> None:
        """`data` as file `name`, in one PUT: a reader sees the old file or the new one."""
        self._request(name, lambda url: self.fs.pipe_file(url, data), "write")

    def remove(self, name: str) -> None:
        """File `name` removed (already gone: nothing to do)."""
        self._request(name, _or_none(lambda url: self.fs.rm_file(url)), "remove")

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_fs": None, "_pid": 0}
