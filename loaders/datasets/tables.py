"""TableDataset: a `prep table` dataset, a batch read a column and contiguous run at a time."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Unpack

import numpy as np
import torch

from loaders.datasets.base import Remote, ShardedDataset
from loaders.fields.column import NAT, Column
from loaders.format import FormatError
from loaders.read.buffers import new_batch
from loaders.read.loader import Batch

MAX_RUNS = 16  # more contiguous runs than this in a batch: gather instead
Run = tuple[int, slice, slice]  # a shard, rows of the batch, its rows
Part = tuple[int, int, int, np.ndarray]  # a shard, a, b, its rows: into order[a:b]
Plan = tuple[list[Run], list[Part], np.ndarray | None]  # runs, or parts and order (None: as is)


class TableDataset(ShardedDataset):
    """The rows of one split: item i is (x_num, x_cat, y) (y with --target): numeric columns
    float32, NaN for missing (times: ns since the epoch), codes int64; then the missing mask,
    bool (n_num,), with `missing_mask=True`, and the row's index with `index=True`.
    `in_memory=True` reads the split into RAM once per process. `vocab[name]`: the values of
    codes 2, 3, ...; `mean`, `std`: over the train rows; `classes`: a coded target's names.

    Examples:
        >>> from loaders import TableDataset
        >>> ds = TableDataset("data/demo-table", split="train")
        >>> x_num, x_cat, y = ds[0]
        >>> x_num.dtype, x_cat.dtype
        (torch.float32, torch.int64)
    """

    unsplit = ("rows", "repack with --val-fraction, or use split='train'")

    def __init__(
        self,
        root: str | os.PathLike[str],
        split: str = "train",
        *,
        missing_mask: bool = False,
        in_memory: bool = False,
        index: bool = False,
        **store: Unpack[Remote],
    ):
        super().__init__(root, split=split, **store)
        self.missing_mask, self.in_memory, self.with_index = missing_mask, in_memory, index
        if not any(isinstance(f, Column) for f in self.declared.values()):
            raise ValueError(f"{self.store.root} has no table columns (packed by prep table)")
        on = {"y": self.target is not None, "missing": missing_mask, "index": index}
        self.fields = ("x_num", "x_cat", *(k for k, v in on.items() if v))  # what a batch holds

    @cached_property
    def _fields(self) -> dict[str, Column]:  # array name -> its column
        return {n: f for n, f in self.declared.items() if isinstance(f, Column)}

    @cached_property
    def _columns(self) -> dict[str, Column]:  # column name -> its field
        return {f.name: f for f in self._fields.values()}

    def _names(self, role: str) -> list[str]:
        """The arrays of the columns of `role`, in the table's order (num_0, num_1...)."""
        names = [n for n, f in self._fields.items() if f.role == role]
        return sorted(names, key=lambda a: int(a.rsplit("_", 1)[1]) if a[-1].isdigit() else 0)

    @cached_property
    def numeric_columns(self) -> list[str]:
        return [self._fields[a].name for a in self._names("num")]

    @cached_property
    def categorical_columns(self) -> list[str]:
        return [self._fields[a].name for a in self._names("cat")]

    @cached_property
    def target(self) -> str | None:
        targets = self._names("target")
        return self._fields[targets[0]].name if targets else None

    @cached_property
    def vocab(self) -> dict[str, list[str]]:
        return {n: list(c.vocab) for n, c in self._columns.items() if c.vocab is not None}

    @cached_property
    def mean(self) -> torch.Tensor:
        means = [self._columns[n].mean for n in self.numeric_columns]
        return torch.tensor([0.0 if m is None else m for m in means])

    @cached_property
    def std(self) -> torch.Tensor:
        stds = [self._columns[n].std or 1.0 for n in self.numeric_columns]
        return torch.tensor(stds, dtype=torch.float32)

    @cached_property
    def _target_first(self) -> int:
        """A coded target's first code: 0 (class ids), or 2 (packed before class ids)."""
        return self._columns[self.target].first if self.target is not None else 2

    @cached_property
    def classes(self) -> list[str] | None:
        """The class names of a text or --categorical target (class id i is classes[i])."""
        vocab = self.vocab.get(self.target or "")
        return list(vocab) if vocab is not None and self._target_first == 0 else None

    @cached_property
    def num_classes(self) -> int | None:
        """A classification target's class count, or an integer target's max + 1; else None."""
        col = self._columns.get(self.target or "")
        if col is None:
            return None
        if col.vocab is not None:
            return len(col.vocab) + self._target_first
        if col.type in ("int", "bool") and col.lo is not None and col.lo >= 0:
            return int(col.hi or 0) + 1
        return None

    def embedding_sizes(self) -> dict[str, int]:
        """Rows an embedding table needs per categorical column: its vocabulary + 2."""
        return {n: len(self.vocab[n]) + 2 for n in self.categorical_columns}

    @cached_property
    def _times(self) -> np.ndarray:
        return np.array([self._columns[n].type == "time" for n in self.numeric_columns])

    def _plan(self, idx: np.ndarray) -> Plan:
        """Where a batch's rows lie: one shard lookup for every array of the batch."""
        if not len(idx):
            return [], [], None
        k = np.searchsorted(self._starts, idx, side="right") - 1
        breaks = np.flatnonzero((np.diff(idx) != 1) | (np.diff(k) != 0)) + 1
        if len(breaks) < MAX_RUNS:
            runs = []
            for a, b in itertools.pairwise([0, *breaks.tolist(), len(idx)]):
                local = int(idx[a] - self._starts[k[a]])
                runs.append((int(k[a]), slice(a, b), slice(local, local + b - a)))
            return runs, [], None
        # A gather in the batch's order: sorting costs more than it saves (bench row 8a)
        if (k == k[0]).all():
            order, parts = None, [(int(k[0]), 0, len(idx), idx - self._starts[k[0]])]
        else:
            order = np.argsort(k.astype(np.int32), kind="stable")  # a radix sort: few shards
            grouped = idx[order]
            bounds = np.searchsorted(k[order], np.arange(len(self._shards) + 1))
            parts = [
                (s, a, b, grouped[a:b] - self._starts[s])
                for s, (a, b) in enumerate(itertools.pairwise(bounds.tolist()))
                if a < b
            ]
        return [], parts, order

    def _fill(self, out: np.ndarray, names: list[str], plan: Plan) -> None:
        """out[:, j] (or out, 1-D) = array names[j] at the plan's rows, in the batch's order."""
        runs, parts, order = plan
        cols = out[:, None] if out.ndim == 1 else out  # a reshape fails on an empty batch
        for shard, dst, src in runs:
            for j, name in enumerate(names):
                cols[dst, j] = self.arrays.array(self._shards[shard], name)[src]
        if not parts:
            return
        # A gather per array and shard into a column-major buffer (of the arrays' dtype when
        # they share one: np.take writes in place), then one copy into the rows that widens.
        kinds = {self.store.manifest.arrays[n].dtype for n in names}
        buf = np.empty((len(names), len(out)), kinds.pop() if len(kinds) == 1 else out.dtype)
        for shard, a, b, local in parts:
            for j, name in enumerate(names):
                arr = self.arrays.array(self._shards[shard], name)
                if arr.dtype == buf.dtype:
                    arr.take(local, out=buf[j, a:b], mode="clip")  # rows checked already
                else:
                    buf[j, a:b] = arr.take(local, mode="clip")
        cols[slice(None) if order is None else order] = buf.T

    @cached_property
    def _rows(self) -> tuple[torch.Tensor, ...]:  # in_memory: every row, once per process
        return self._read(np.arange(len(self))).tensors

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        idx = self._checked(indices)
        if not self.in_memory:
            out = list(self._read(idx).tensors)
        else:
            rows = torch.from_numpy(idx)
            out = []
            for t in self._rows:  # one row gather per tensor, as from in-memory tensors
                buf = new_batch((len(idx), *t.shape[1:]), t.dtype)
                out.append(torch.index_select(t, 0, rows, out=buf))
        if self.with_index:  # made here, never read: the in-memory copy holds no index
            out.append(self._index(idx))
        return Batch(tuple(out))

    def _read(self, idx: np.ndarray) -> Batch:  # from the maps
        b, nums, cats = len(idx), self._names("num"), self._names("cat")
        plan = self._plan(idx)
        x_num = new_batch((b, len(nums)), torch.float32)
        x_cat = new_batch((b, len(cats)), torch.int64)
        self._fill(x_num.numpy(), nums, plan)
        self._fill(x_cat.numpy(), cats, plan)
        for j in np.flatnonzero(self._times).tolist():  # NaT's float32 becomes NaN
            raw = np.zeros(b, np.int64)
            self._fill(raw, [nums[j]], plan)
            x_num.numpy()[raw == NAT, j] = np.nan
        out = [x_num, x_cat]
        if self.target is not None:
            y = new_batch((b,), self._target_dtype(["target"]))
            self._fill(y.numpy(), ["target"], plan)
            out.append(y)
        if self.missing_mask:
            mask = new_batch((b, len(nums)), torch.bool)
            mask.numpy()[:] = False
            masked = [j for j, a in enumerate(nums) if self._fields[a].mask]
            if masked:
                got = np.zeros((b, len(masked)), np.uint8)
                self._fill(got, [f"{nums[j]}_missing" for j in masked], plan)
                mask.numpy()[:, masked] = got.astype(bool)
            out.append(mask)
        return Batch(tuple(out))

    def decode(self, column: str, codes: Any) -> list[str | None]:
        """A column's codes (a coded target's class ids) as its values (None: missing)."""
        names: list[str | None] = [None, "<unseen>", *self.vocab[column]]
        if column == self.target and self._target_first == 0:
            names = list(self.vocab[column])
        flat = np.asarray(codes).reshape(-1).astype(np.int64)
        odd = flat[(flat < 0) | (flat >= len(names))]
        if len(odd):  # values prep verify checks, not the open: an IndexError (or names[-1])
            raise FormatError(
                f"{self.store.root}: code {odd[0]} of column {column} is not one of its "
                f"{len(names)} values. HINT: run `prep verify`, repack"
            )
        return [names[c] for c in flat.tolist()]

    def _shown(self) -> dict[str, Any]:
        n, c = len(self.numeric_columns), len(self.categorical_columns)
        return dict(split=self.split, rows=len(self), numeric=n, categorical=c, target=self.target)
