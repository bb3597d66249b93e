"""The shard store (`ds.store`): a dataset's manifest, read once, and its arrays, mapped;
SharedArrays: those arrays, or one copy of them in shared memory, and where samples are."""

from __future__ import annotations

import hashlib
import os
import resource
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from loaders.fields import declared
from loaders.fields.base import decode_source
from loaders.fields.checks import check_files, check_shard
from loaders.format import (
    MANIFEST,
    OFFSETS,
    FormatError,
    Manifest,
    check_array,
    local_resolver,
    map_layout,
    problems_error,
    read_manifest_file,
    safe_path,
)
from loaders.format.arrays import Arrays, Layout
from loaders.format.schema import VERSIONS, Stamp

# A quarter of this process's open-file limit, 16 to 512: each map holds a descriptor, the rest
# are for DataLoader pipes, sockets and the user's files.
_SOFT = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
DEFAULT_MAX_OPEN = 512 if _SOFT == resource.RLIM_INFINITY else min(512, max(16, _SOFT // 4))


def is_hex(text: str) -> bool:
    """Whether `text` can name a version: 4 to 64 lowercase hex digits (never a path)."""
    return 4 <= len(text) <= 64 and all(c in "0123456789abcdef" for c in text)


def _stamp(st: os.stat_result) -> Stamp:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


# Up to this many shards, a store checks every file when it opens a dataset; past it, each
# shard's when it is first read (a million shards open in the time it takes to map the index).
EAGER_SHARDS = 4096


class Backend(Protocol):
    """Where a dataset's files are: the manifest, its resolver, a local path to map a file."""

    root: Any  # a Path; for a remote backend a loaders.remote.Url (a str joined like a Path)

    def read_manifest(self) -> tuple[bytes, Stamp]: ...
    def resolver(self) -> Any: ...
    def manifest_stamp(self) -> Stamp | None: ...
    def local_path(self, name: str) -> Path: ...
    def problems(self, manifest: Manifest) -> list[str]: ...


class LocalBackend:
    """A folder on a local or mounted file system: files are mapped where they are.

    Examples:
        >>> from loaders import LocalBackend, ShardStore
        >>> store = ShardStore("data/demo-packed", backend=LocalBackend("data/demo-packed"))
    """

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def read_manifest(self) -> tuple[bytes, Stamp]:
        data, st = read_manifest_file(self.root)
        return data, _stamp(st)

    def manifest_stamp(self) -> Stamp | None:
        try:
            return _stamp(os.stat(self.root / MANIFEST))
        except OSError:
            return None

    def local_path(self, name: str) -> Path:
        return safe_path(self.root, name)

    def resolver(self) -> Any:
        return local_resolver(self.root)

    def read_version(self, sha: str) -> tuple[bytes, Any] | None:
        """The kept manifest whose sha256 starts with `sha` (VERSIONS/SHA/, left by an append)
        and the resolver of its shard index; None where none is kept."""
        folder = self.root / VERSIONS
        found = sorted(p for p in folder.glob(f"{sha}*") if p.is_dir()) if is_hex(sha) else []
        if len(found) != 1:
            return None
        data, _ = read_manifest_file(found[0])
        return data, local_resolver(found[0])

    def problems(self, manifest: Manifest) -> list[str]:
        return check_files(self.root, manifest)


class ShardStore:
    """A dataset folder: its manifest, checked against the files when made (past EAGER_SHARDS,
    each shard when first read), and its arrays, mapped lazily, at most `max_open` at a time.
    Pickles without manifest and maps: a worker reads the manifest again (the same bytes).

    Examples:
        >>> from loaders import ShardStore
        >>> store = ShardStore("data/demo-packed")
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_open: int = DEFAULT_MAX_OPEN,
        backend: Backend | None = None,
        version: str | None = None,
        **remote: Any,
    ):
        if max_open < 1:
            raise ValueError(f"max_open {max_open} must be at least 1 open map")
        if backend is None:  # fsspec (loaders.remote) is imported only for a URL
            from loaders.remote import RemoteBackend, url_of

            url, options = url_of(root), any(v is not None for v in remote.values())
            if url is None and options:
                raise ValueError(
                    f"{root} is a local folder: {', '.join(remote)} are for a URL only"
                )
            backend = RemoteBackend(url, hold=max_open, **remote) if url else LocalBackend(root)
        self.backend: Backend = backend
        self.root, self.max_open = self.backend.root, max_open
        data, self._stamp = self.backend.read_manifest()
        resolver = self.backend.resolver()
        if version is not None and not is_hex(version):
            raise ValueError(f"version={version!r} is not a sha256 (or 4+ hex digits of one)")
        if version is not None and not hashlib.sha256(data).hexdigest().startswith(version):
            data, resolver = self._version(version)
        manifest = Manifest.from_json(data, self.root / MANIFEST, resolver)
        declared(manifest)  # the fields against the arrays: one FormatError line if not
        checked: dict[int, Arrays] = {}  # each shard's arrays, laid out by the check
        self._checked = len(manifest.shards) <= EAGER_SHARDS
        if not isinstance(self.backend, LocalBackend):
            problems = self.backend.problems(manifest)
        elif self._checked:
            problems = check_files(self.backend.root, manifest, layouts=checked)
        else:
            problems = []
        if problems:
            raise problems_error(problems)
        self._sha256 = hashlib.sha256(data).digest()
        self._manifest: Manifest | None = manifest
        self._maps: dict[tuple[int, str], np.ndarray] = {}  # in use order: oldest first
        self._windows: frozenset[int] | None = None  # the backend's, when last looked at
        # Where each array checked lies in its file (an evicted map is mapped without a read)
        self._layouts: dict[tuple[int, str], tuple[Path, Layout]] = {
            (i, name): found for i, arrays in checked.items() for name, found in arrays.items()
        }

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:  # after unpickling in a worker
            self._reload()
        assert self._manifest is not None
        return self._manifest

    def _version(self, sha: str) -> tuple[bytes, Any]:
        """A kept version's manifest bytes and index resolver (ValueError: none kept)."""
        read = getattr(self.backend, "read_version", None)
        found = read(sha) if read is not None else None
        if found is None:
            raise ValueError(
                f"{self.root} keeps no version {sha!r}. HINT: `prep log {self.root}` lists the "
                "versions kept (a full sha256 or a unique prefix of one)"
            )
        return found

    def _reload(self) -> None:
        """Read the manifest again: the file first read, or the same bytes kept as a version
        (an append or merge since: this store still reads the dataset as it opened it)."""
        data, stamp = self.backend.read_manifest()
        resolver = self.backend.resolver()
        if hashlib.sha256(data).digest() != self._sha256:
            read = getattr(self.backend, "read_version", None)
            found = read(self._sha256.hex()) if read is not None else None
            if found is None or hashlib.sha256(found[0]).digest() != self._sha256:
                raise FormatError(
                    f"{self.root / MANIFEST} changed since the dataset was opened (repacked "
                    "with --overwrite?). HINT: make the dataset object again, and restart the "
                    "DataLoader's workers"
                )
            data, resolver = found
        self._stamp = stamp  # the same bytes (touched, an identical repack, or a kept version)
        if self._manifest is None:
            self._manifest = Manifest.from_json(data, self.root / MANIFEST, resolver)

    @property
    def version(self) -> str:
        """The sha256 of the manifest this store reads (`prep log` names versions by it)."""
        return self._sha256.hex()

    def current(self) -> bool:
        """Whether the folder's manifest is still the one this store reads."""
        try:
            data, _ = self.backend.read_manifest()
        except FormatError:
            return True  # nothing newer to read
        return hashlib.sha256(data).digest() == self._sha256

    def check(self) -> None:
        """FormatError if the folder was repacked since (one stat; once a batch)."""
        if self._manifest is None or self.backend.manifest_stamp() != self._stamp:
            self._reload()
        windows = getattr(self.backend, "windows", None)  # a remote dataset read quasi_random
        if windows is not None and windows is not self._windows:  # the sampler moved on: a
            self._windows = windows  # map outside its windows would pin an evicted file
            for key in [k for k in list(self._maps) if k[0] not in windows]:
                self._maps.pop(key, None)

    def array(self, shard: int, name: str) -> np.ndarray:
        """Array `name` of shard `shard`, read-only; past `max_open`, the oldest map dropped."""
        key = (shard, name)
        arr = self._maps.pop(key, None)
        if arr is None:
            path, layout = self._layout(shard, name)
            try:
                arr = map_layout(path, layout)
            except OSError as e:
                raise OSError(
                    e.errno,
                    f"{path}: cannot map it ({e.strerror}). HINT: too many open files? "
                    f"Pass a max_open below {self.max_open}, or raise `ulimit -n`",
                ) from e
            self.check()  # mapped after a repack's swap: refuse it, as the next batch would
            if len(self._maps) >= self.max_open:
                # list() copies the keys in one step: make_loader's threads share the store
                for oldest in list(self._maps)[:1]:
                    self._maps.pop(oldest, None)
        self._maps[key] = arr  # now the most recently used
        return arr

    def source(self, shard: int, k: int) -> str | None:
        """Sample `k` of shard `shard`'s field "source" (its input, relative to SRC), or None."""
        if "source" not in self.manifest.arrays:
            return None
        data, off = self.array(shard, "source"), self.array(shard, "source" + OFFSETS)
        return decode_source(data[off[k] : off[k + 1]])

    def _layout(self, shard: int, name: str) -> tuple[Path, Layout]:
        """The array's local file and layout, checked the first time in this process."""
        found = self._layouts.get((shard, name))
        if found is None and not self._checked and isinstance(self.backend, LocalBackend):
            checked: Arrays = {}  # a shard of a large dataset, checked as a small one's at open
            problems = check_shard(self.manifest, shard, self.backend.local_path, out=checked)
            if problems:
                raise problems_error(problems)
            self._layouts |= {(shard, n): where for n, where in checked.items()}
            found = self._layouts.get((shard, name))
        if found is None:
            ref, spec = self.manifest.ref(shard, name)  # name + OFFSETS: a ragged one's offsets
            path = self.backend.local_path(ref.file)
            layout = check_array(path, ref, spec, name)
            found = self._layouts[(shard, name)] = path, layout
        elif not isinstance(self.backend, LocalBackend):  # a cached copy may have been evicted
            found = self.backend.local_path(self.manifest.ref(shard, name)[0].file), found[1]
        return found

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_manifest": None, "_maps": {}, "_layouts": {}, "_windows": None}


@dataclass(eq=False)
class Places(Sequence[str]):
    """Where each sample of a batch is, "FILE (shard S, sample K)": made when asked (errors)."""

    files: dict[int, str]  # shard -> its file's name, in folder `root`
    shard: np.ndarray
    local: np.ndarray
    source: Callable[[int, int], str | None] | None = None  # ShardStore.source
    root: object = ""  # a Path or a URL, joined only when a place is asked for

    def __len__(self) -> int:
        return len(self.local)

    def __getitem__(self, j: int) -> str:  # type: ignore[override]
        s, k = int(self.shard[j]), int(self.local[j])
        src = self.source(s, k) if self.source is not None else None
        file = f"{self.root}/{self.files[s]}" if self.root else self.files[s]
        return f"{file} (shard {s}, sample {k}){f', packed from {src}' if src else ''}"


def by_shard(shard: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(shard, positions in the batch of its samples) for each shard of a batch, in order.

    >>> [(s, p.tolist()) for s, p in by_shard(np.array([2, 0, 2]))]
    [(0, [1]), (2, [0, 2])]
    """
    if len(shard) == 0:
        return []
    order = np.argsort(shard, kind="stable")
    cuts = np.flatnonzero(np.diff(shard[order])) + 1
    return [(int(shard[g[0]]), g) for g in np.split(order, cuts)]
