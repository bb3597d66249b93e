"""The shard store: what a dataset holds of its folder, the manifest and the open memory maps.

A dataset holds one `ShardStore` (`ds.store`). The store reads the manifest once, hashes exactly
the bytes it parsed, and maps shard arrays lazily, keeping at most `max_open` maps (each holds a
file descriptor: Python's mmap keeps a duplicate of it). Reading goes through a backend that
turns a manifest-relative file name into a local path to map: `LocalBackend` for a folder on a
local or mounted file system.

A repack (`prep pack --overwrite` swaps in a new folder) is found at the next batch: `check()`
costs one `os.stat` of manifest.json and re-reads it only when its stat changed.
"""

from __future__ import annotations

import hashlib
import os
import resource
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from loaders.fields import declared
from loaders.fields.base import decode_source
from loaders.fields.checks import check_files, check_one
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
from loaders.format.arrays import Layout
from loaders.format.values import Arrays


def _default_max_open() -> int:
    """A quarter of this process's open-file limit, 16 to 512: each map holds a descriptor, and
    the rest stay for DataLoader pipes, sockets and the user's files (1,024, a common limit,
    gives 256; `ulimit -n 256` gives 64). Random order over more arrays than this re-maps files:
    raise `ulimit -n`, or read in quasi-random order."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 512 if soft == resource.RLIM_INFINITY else min(512, max(16, soft // 4))


DEFAULT_MAX_OPEN = _default_max_open()

Stamp = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns of manifest.json


def _stamp(st: os.stat_result) -> Stamp:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


# Up to this many shards, a store checks every file when it opens a dataset (a stat and a header
# read each); past it, each shard's when it is first read, so a dataset of a million shards opens
# in the time it takes to map its index.
EAGER_SHARDS = 4096


class Backend(Protocol):
    """Where a dataset's files are: the manifest's bytes, and a local path to map per file."""

    root: Any  # a Path; for a remote backend a loaders.remote.Url (a str joined like a Path)

    def read_manifest(self) -> tuple[bytes, Stamp]: ...

    def resolver(self) -> Any:
        """The shard index's files: (name, record) -> a local path (loaders.format.Resolve)."""

    def manifest_stamp(self) -> Stamp | None:
        """A cheap identity of the manifest now (None: it is gone)."""

    def local_path(self, name: str) -> Path:
        """A local file holding `name` (a manifest-relative file name), ready to map."""

    def problems(self, manifest: Manifest) -> list[str]:
        """What is wrong with the files against the manifest (check_files' lines)."""


class LocalBackend:
    """A dataset folder on a local or mounted file system: files are mapped where they are."""

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

    def problems(self, manifest: Manifest) -> list[str]:
        return check_files(self.root, manifest)


def make_backend(root: str | os.PathLike[str], max_open: int, **remote: Any) -> Backend:
    """The backend for `root`: a URL is read through loaders.remote (fsspec, imported only
    then) with `remote`'s cache_dir, cache_limit and storage_options; a path is local."""
    from loaders.remote import RemoteBackend, url_of  # fsspec itself only for a URL

    url = url_of(root)
    if url is not None:
        return RemoteBackend(url, hold=max_open, **remote)
    if any(v is not None for v in remote.values()):
        raise ValueError(f"{root} is a local folder: {', '.join(remote)} are for a URL only")
    return LocalBackend(root)


class ShardStore:
    """A dataset folder: its manifest and fields, validated against the files when the store is
    made (each shard when first read, past EAGER_SHARDS), and its shard arrays, mapped lazily,
    at most `max_open` at a time (least recently used first out).

    Pickles without the manifest and the maps: a worker process reads the manifest again,
    refusing it unless it has the bytes first read, and maps what it reads itself."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_open: int = DEFAULT_MAX_OPEN,
        backend: Backend | None = None,
        **remote: Any,
    ):
        if max_open < 1:
            raise ValueError(f"max_open {max_open} must be at least 1 open map")
        self.backend = backend or make_backend(root, max_open, **remote)
        self.root, self.max_open = self.backend.root, max_open
        data, self._stamp = self.backend.read_manifest()
        manifest = Manifest.from_json(data, self.root / MANIFEST, self.backend.resolver())
        declared(manifest)  # the fields against the arrays: one FormatError line if not
        checked: dict[int, Arrays] = {}  # each shard's arrays, laid out by the check
        self._checked = len(manifest.shards) <= EAGER_SHARDS
        if not isinstance(self.backend, LocalBackend):
            problems = self.backend.problems(manifest)
        elif self._checked:
            problems = check_files(self.root, manifest, layouts=checked)
        else:
            problems = []
        if problems:
            raise problems_error(problems)
        self._sha256 = hashlib.sha256(data).digest()
        self._manifest: Manifest | None = manifest
        self._maps: dict[tuple[int, str], np.ndarray] = {}  # in use order: oldest first
        self._windows: frozenset[int] | None = None  # the backend's, when last looked at
        # Where each array mapped once lies in its file: a map evicted and needed again is
        # mapped without reading its header again (a few small tuples a shard).
        self._layouts: dict[tuple[int, str], tuple[Path, Layout]] = {
            (i, name): found for i, arrays in checked.items() for name, found in arrays.items()
        }

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:  # after unpickling in a worker
            self._reload()
        assert self._manifest is not None
        return self._manifest

    def _reload(self) -> None:
        """Read the manifest again: refuse it unless it is the file first read."""
        data, stamp = self.backend.read_manifest()
        if hashlib.sha256(data).digest() != self._sha256:
            raise FormatError(
                f"{self.root / MANIFEST} changed since the dataset was opened (repacked with "
                "--overwrite?). HINT: make the dataset object again, and restart the "
                "DataLoader's workers"
            )
        self._stamp = stamp  # the same bytes (touched, or an identical repack)
        if self._manifest is None:
            self._manifest = Manifest.from_json(data, self.root / MANIFEST, self.backend.resolver())

    def check(self) -> None:
        """Raise FormatError if the folder was repacked since the store was made: one stat, and
        a re-read only when the stat changed. Datasets call it once a batch."""
        if self._manifest is None or self.backend.manifest_stamp() != self._stamp:
            self._reload()
        windows = getattr(self.backend, "windows", None)  # a remote dataset read quasi_random
        if windows is not None and windows is not self._windows:  # the sampler moved on: a
            self._windows = windows  # map outside its windows would pin an evicted file
            for key in [k for k in list(self._maps) if k[0] not in windows]:
                self._maps.pop(key, None)

    def array(self, shard: int, name: str) -> np.ndarray:
        """Array `name` of shard `shard` (its index in the manifest), read-only.

        The store drops its reference to the least recently used map past `max_open`; the map
        (and its descriptor) goes once nothing else refers to it."""
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
        """The input file of sample `k` of shard `shard` as the dataset stores it (field
        "source": a path relative to the packed SRC); None for a dataset packed without."""
        if "source" not in self.manifest.arrays:
            return None
        data, off = self.array(shard, "source"), self.array(shard, "source" + OFFSETS)
        return decode_source(data[off[k] : off[k + 1]])

    def _layout(self, shard: int, name: str) -> tuple[Path, Layout]:
        """The array's local file and where it lies in it, checked against the manifest the
        first time in this process."""
        found = self._layouts.get((shard, name))
        if found is None and not self._checked and isinstance(self.backend, LocalBackend):
            self._check_shard(shard)
            found = self._layouts.get((shard, name))
        if found is None:
            ref, spec = self.manifest.ref(shard, name)  # name + OFFSETS: a ragged one's offsets
            path = self.backend.local_path(ref.file)
            layout = check_array(path, ref, spec, name)
            found = self._layouts[(shard, name)] = path, layout
        elif not isinstance(self.backend, LocalBackend):  # a cached copy may have been evicted
            found = self.backend.local_path(self.manifest.ref(shard, name)[0].file), found[1]
        return found

    def _check_shard(self, shard: int) -> None:
        """A shard of a large dataset, checked as a small one's are at open (once a process)."""
        checked: Arrays = {}
        problems = check_one(self.root, self.manifest, shard, checked)
        if problems:
            raise problems_error(problems)
        self._layouts |= {(shard, name): found for name, found in checked.items()}

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_manifest": None, "_maps": {}, "_layouts": {}, "_windows": None}


def pickled_state(obj: object) -> dict[str, Any]:
    """`obj.__dict__` without the values of its cached properties, which hold what is derived
    from the manifest (per-shard offsets, class names): a worker computes them again, so that
    a dataset pickles to the same few hundred bytes whatever its shard and class count."""
    cls = type(obj)
    return {
        k: v
        for k, v in obj.__dict__.items()
        if not isinstance(getattr(cls, k, None), cached_property)
    }
