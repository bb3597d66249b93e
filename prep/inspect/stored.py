"""A dataset's samples as stored, each field's value as numpy (Field.value), read through the
loaders' shard store: every file is checked first, and a sample that does not decode is one
FormatError naming its file, sample and source."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Field, Label, Labels, declared
from loaders.fields.base import decode_source
from loaders.format import OFFSETS, FormatError, array_name
from loaders.read.store import ShardStore
from prep.run.errors import PrepError


class Stored:
    """The samples of `root` (of split `split`, indexed as SampleDataset indexes them), at
    `size` px for its sized fields (default: the smallest)."""

    def __init__(self, root: str | Path, size: int | None = None, split: str | None = None):
        self.root = Path(root)
        self.store = ShardStore(self.root)
        self.m = self.store.manifest
        self.fields = declared(self.m)
        sizes = self.m.sizes()
        self.size = min(sizes) if size is None and sizes else size
        if sizes and self.size not in sizes:
            raise PrepError(f"{root} has no size {size}. HINT: --size one of {sizes}")
        split_of = self.m.split_of()
        self.shards = np.flatnonzero([split in (None, s) for s in split_of])
        if split is not None and not len(self.shards):
            have = ", ".join(self.m.splits) or "none: it was packed without splits"
            raise PrepError(f"{root} has no split {split!r}. HINT: pass one of its splits ({have})")
        counts = self.m.counts()[self.shards]
        self.starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def locate(self, i: int) -> tuple[int, int]:
        """Sample i's shard (its index in the manifest) and its index in that shard."""
        k = int(np.searchsorted(self.starts, i, side="right")) - 1
        return int(self.shards[k]), i - int(self.starts[k])

    def value(self, name: str, i: int) -> Any:
        """Sample i of field `name` as numpy (Field.value); FormatError naming where it is."""
        s, k = self.locate(i)

        def piece(array: str) -> np.ndarray:  # a raw array's row, a ragged one's piece
            data = self.store.array(s, array)
            if not self.m.arrays[array].ragged:
                return data[k]
            off = self.store.array(s, array + OFFSETS)
            return data[int(off[k]) : int(off[k + 1])]

        try:
            return self.fields[name].value(name, piece, self.size)
        except FormatError as e:
            mine = [a for a in self.fields[name].arrays(name) if a.size in (None, self.size)]
            file = self.m.shards[s].arrays[array_name(mine[0].field, mine[0].size)].file
            src = self.store.source(s, k)
            where = f"{self.root / file} (shard {s}, sample {k})"
            where += f", packed from {src}" if src else ""
            raise FormatError(f"{where}: {e}. HINT: run `prep verify`, then repack") from e

    def column(self, array: str) -> np.ndarray:
        """Array `array` of every shard read, concatenated (small per sample: labels, hashes)."""
        parts = [np.asarray(self.store.array(int(s), array)) for s in self.shards]
        return np.concatenate(parts) if parts else np.zeros(0, self.m.arrays[array].dtype)

    def source(self, i: int) -> str:
        """Sample i's input as the dataset stores it; "#i" without a source field."""
        got = self.store.source(*self.locate(i))
        return f"#{i}" if got is None else got

    def sources(self) -> list[str]:
        """Every sample's source, read a shard at a time ("#i" without a source field)."""
        if "source" not in self.m.arrays:
            return [f"#{i}" for i in range(len(self))]
        out = []
        for s in self.shards.tolist():
            data, off = self.store.array(s, "source"), self.store.array(s, "source" + OFFSETS)
            out += [decode_source(data[a:b]) for a, b in itertools.pairwise(off.tolist())]
        return out

    def splits(self) -> np.ndarray:
        """Each sample's split ("all" for a dataset without splits)."""
        names = [s or "all" for s in self.m.split_of()[self.shards]]
        return np.repeat(np.array(names, dtype=object), np.diff(self.starts))

    def picture(self) -> str | None:
        """The first field that makes pictures (an image, a video, a volume), or None."""
        return next((n for n, f in self.fields.items() if makes_pictures(f)), None)

    def on(self, picture: str) -> list[str]:
        """The fields drawn on field `picture` (Field.drawn_on), in drawing order (Field.layer)."""
        on = [n for n, f in self.fields.items() if f.drawn_on() == picture]
        return sorted(on, key=lambda n: self.fields[n].layer)

    def labels(self) -> tuple[str | None, np.ndarray | None]:
        """The first Label field (else Labels field) and its class ids (a Labels': an object's)."""
        for kind in (Label, Labels):
            name = next((n for n, f in self.fields.items() if isinstance(f, kind)), None)
            if name is not None:
                return name, self.column(name).astype(np.int64)
        return None, None


def makes_pictures(f: Field) -> bool:
    """Whether the field's kind shows its values as pictures (Field.pictures)."""
    return type(f).pictures is not Field.pictures
