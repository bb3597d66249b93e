"""The shard store: a dataset folder's manifest and its open memory maps."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import MANIFEST, FormatError, Manifest, load_manifest, open_array, read_manifest


class ShardStore:
    """What every dataset of `loaders` keeps of its folder: the manifest, validated once when
    the dataset is made, and the shard arrays, memory-mapped lazily once per process.

    Neither is pickled: a worker process reads the manifest again (checking that it is still the
    same file) and maps the arrays it needs itself, so the dataset pickles to a few KB."""

    def _open_store(self, root: str | os.PathLike[str], kind: str) -> Manifest:
        self.root = Path(root)
        manifest = load_manifest(self.root)
        if manifest.kind != kind:
            raise FormatError(f"{self.root} holds {manifest.kind}, not {kind}")
        self._manifest: Manifest | None = manifest
        self._manifest_sha256 = _sha256(self.root / MANIFEST)
        self._maps: dict[tuple[int, str], np.ndarray] = {}
        return manifest

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:  # after unpickling in a worker
            self._manifest = read_manifest(self.root, self._manifest_sha256)
        return self._manifest

    def _map(self, shard: int, name: str) -> np.ndarray:
        """Array `name` of shard `shard` (its index in the manifest), mapped once per process.

        A plain ndarray view of the map: indexing the np.memmap subclass costs 5x more."""
        arr = self._maps.get((shard, name))
        if arr is None:
            m = self.manifest
            ref, spec = m.shards[shard].arrays[name], m.arrays[name]
            arr = self._maps[(shard, name)] = np.asarray(open_array(self.root, ref, spec, name))
        return arr

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_manifest"] = None
        state["_maps"] = {}
        return state


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
