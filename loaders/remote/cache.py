"""The node's cache of remote files: `cache_dir/files/XX/SHA256`, verified in a `.tmp` file then
renamed, its mtime its last use (LRU). Lock files: `SHA256.fetch` (held by the one process that
downloads it) and `SHA256.use` (held shared by each reader; eviction skips a file whose lock it
cannot take exclusively)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import socket
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from loaders.format import FormatError, sha256_file
from loaders.format.spec import is_sha256

HOST = socket.gethostname()
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def default_cache_dir() -> Path:
    return Path(os.environ.get("PREP_CACHE") or Path.home() / ".cache" / "prep")


def parse_bytes(limit: int | str | None) -> int | None:
    """'200GB' -> 200 * 10**9 (KB/MB/GB/TB powers of 1000, KiB/MiB/GiB/TiB of 1024)."""
    if limit is None or isinstance(limit, int):
        if limit is not None and limit < 1:
            raise ValueError(f"cache_limit {limit} must be at least 1 byte")
        return limit
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", limit)
    if not m or m.group(2).upper() not in UNITS:
        raise ValueError(f"cache_limit {limit!r} is not a size like '200GB' or '512MiB'")
    return parse_bytes(max(1, int(float(m.group(1)) * UNITS[m.group(2).upper()])))


_warned: set[tuple[str, int]] = set()  # (url, window): once each


def warn_small_cache(url: str, limit: int | None, shard_bytes: list[int], window: int) -> None:
    """Warn once when `limit` is below `window` of the largest shards (0: the whole dataset)."""
    need = sum(sorted(shard_bytes)[-window:]) if window else sum(shard_bytes)
    if limit is None or limit >= need or (url, window) in _warned:
        return
    _warned.add((url, window))
    what = f"one window of {window} shards" if window else "the dataset, read in random order"
    hint = "raise cache_limit, or pack smaller shards"
    if not window:
        hint = "use make_loader(..., order='quasi_random'), or raise cache_limit"
    warnings.warn(
        f"{url}: cache_limit {limit:,} bytes is below {what} ({need:,} bytes): each epoch "
        f"downloads every shard again. HINT: {hint}",
        stacklevel=4,
    )


def _locked(path: str | Path, how: int) -> int:
    """The fd of lock file `path` (made, with its folder, if need be), flock'ed `how`."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except FileNotFoundError:  # the first file of its folder
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, how)
    except OSError:
        os.close(fd)
        raise
    return fd


class FileCache:
    """One cache folder as this process uses it: a shared `.use` lock on the last `hold` files
    it handed out keeps other processes from evicting them."""

    def __init__(self, cache_dir: Path, limit: int | None, hold: int):
        self.dir, self.limit, self.hold = cache_dir / "files", limit, max(1, hold)
        self._held: OrderedDict[str, int] = OrderedDict()  # sha256 -> fd of its .use lock
        self._whole: set[str] = set()  # of those, the ones found whole: handed out at once
        self._pinned: dict[str, int] = {}  # held for the process's life (pin)
        self._lock = threading.Lock()  # prefetch threads share `_held`
        # Eviction order: a key per entry, (sha256, mtime_ns) -> smaller first, None: keep it
        # (loaders.remote.prefetch sets it from the sampler's windows); default LRU.
        self.rank: Callable[[str, int], tuple[int, int] | None] = lambda sha, mtime: (0, mtime)

    def entry(self, sha256: str, source: str = "") -> Path:
        """The cached file `sha256` (of `source`, named in errors)."""
        if not is_sha256(sha256):  # a manifest's "../../x" would name a file outside the cache
            raise FormatError(
                f"{source or self.dir}: the manifest's sha256 {str(sha256)[:80]!r} is not 64 "
                "lowercase hex digits; refused. HINT: the manifest was edited or damaged: repack"
            )
        return Path(f"{self.dir}/{sha256[:2]}/{sha256}")

    def get(
        self, sha256: str, size: int, source: str, download: Callable[[BinaryIO], None]
    ) -> Path:
        """The cached file `sha256`, `download(file)`ed by one process unless it is there whole."""
        path = self.entry(sha256, source)
        with self._lock:
            if sha256 in self._whole:  # whole when handed out, and held since: still there
                self._held.move_to_end(sha256)
                return path
        self._use(sha256)  # before looking: eviction now skips it
        if not _whole(path, size):
            fd = _locked(path.with_name(sha256 + ".fetch"), fcntl.LOCK_EX)
            try:
                if not _whole(path, size):  # not fetched by another process meanwhile
                    self._fetch(path, sha256, size, source, download)
                    self.evict()
            finally:
                os.close(fd)
        with contextlib.suppress(OSError):
            os.utime(path)  # its last use, for LRU eviction
        with self._lock:
            if sha256 in self._held:
                self._whole.add(sha256)
        return path

    def _fetch(
        self, path: Path, sha256: str, size: int, source: str, download: Callable[[BinaryIO], None]
    ) -> None:
        tmp = path.with_name(f"{sha256}.{HOST}-{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            with open(tmp, "wb") as f:
                download(f)
                f.flush()
                os.fsync(f.fileno())
            got_size, got = tmp.stat().st_size, sha256_file(tmp)
            if (got_size, got) != (size, sha256):
                raise FormatError(
                    f"{source}: {got_size} bytes with sha256 {got[:16]}..., the manifest says "
                    f"{size} bytes with sha256 {sha256[:16]}... (changed or corrupted remotely); "
                    "refused, not cached. HINT: run `prep verify` on the dataset's URL, repack"
                )
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def _use(self, sha256: str) -> None:
        """Hold `sha256`'s .use lock (shared), dropping the oldest past `hold`."""
        with self._lock:
            fd = self._held.pop(sha256, None)
            if fd is None:  # the shared lock waits only while an evictor checks the file
                fd = _locked(f"{self.entry(sha256)}.use", fcntl.LOCK_SH)
            self._held[sha256] = fd
            while len(self._held) > self.hold:
                self._drop(next(iter(self._held)))

    def pin(self, sha256: str) -> None:
        """Hold `sha256` as long as this process runs (a shard index, mapped for the whole run)."""
        with self._lock:
            if sha256 not in self._pinned:  # its own open file: held past _drop's close
                self._pinned[sha256] = _locked(f"{self.entry(sha256)}.use", fcntl.LOCK_SH)

    def hold_only(self, keep: set[str]) -> None:
        """Let go of the files not in `keep`: others may evict them (a map keeps the bytes)."""
        with self._lock:
            dropped = [s for s in self._held if s not in keep]
            for sha256 in dropped:
                self._drop(sha256)
        if dropped and self.limit is not None:  # what another process's fetch could not evict
            self.evict()  # while this one held it goes now, not at the next fetch

    def _drop(self, sha256: str) -> None:
        """Let go of a held file (the lock taken): its last use is now, for LRU eviction."""
        os.close(self._held.pop(sha256))
        if sha256 in self._whole:
            self._whole.discard(sha256)
            with contextlib.suppress(OSError):
                os.utime(self.entry(sha256))

    def evict(self) -> None:
        """Remove the files first in `rank` that no process holds until under the limit."""
        entries = []
        for p in self.dir.glob("??/*"):
            if len(p.name) == 64 and "." not in p.name:
                with contextlib.suppress(FileNotFoundError):
                    st = p.stat()
                    entries.append((st.st_mtime_ns, st.st_size, p))
        total = sum(e[1] for e in entries)
        if self.limit is None:
            return
        ranked = [(key, size, p) for t, size, p in entries if (key := self.rank(p.name, t))]
        for _, size, p in sorted(ranked):
            if total <= self.limit:
                break
            if p.name in self._held:
                continue
            try:
                fd = _locked(p.with_name(p.name + ".use"), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another process reads it
            try:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    total -= size
            finally:
                os.close(fd)


def _whole(path: Path, size: int) -> bool:
    """A complete cache entry: renamed into place only once verified, so its size suffices."""
    try:
        return path.stat().st_size == size
    except FileNotFoundError:
        return False
