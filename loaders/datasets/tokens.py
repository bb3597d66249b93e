"""Token datasets written by `prep tokenize`: training windows and whole documents.

A split is the concatenation of its shards' `tokens` arrays, in manifest order. Shard files are
memory-mapped lazily, once per process, and never pickled; a window is one memory-map slice (two
when it spans a shard boundary), so DataLoader workers share the corpus through the page cache.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Unpack

import numpy as np
import torch

from loaders.datasets.base import Remote, ShardedDataset
from loaders.fields.tokens import Tokens
from loaders.format import OFFSETS
from loaders.read.batches import Batch, check_indices, new_batch
from loaders.read.store import DEFAULT_MAX_OPEN

OUT_DTYPE = "int64"  # what windows and documents come out as: what embeddings index with


class _TokenSplit(ShardedDataset):
    """The shards of one split of a token dataset (ShardedDataset: `_starts` counts its
    documents). What is derived from the manifest (shard offsets) is computed again after
    unpickling, never pickled."""

    def __init__(
        self, root: str | os.PathLike[str], split: str, max_open: int, **remote: Unpack[Remote]
    ):
        super().__init__(root, split=split, max_open=max_open, **remote)
        if not isinstance(self.declared.get("tokens"), Tokens):
            raise ValueError(f"{self.store.root} has no token stream (packed by prep tokenize)")

    def no_split(self, split: str) -> str:
        return (
            f"{self.store.root} has no {split!r} documents; it has splits "
            f"{sorted(self.store.manifest.splits)}. HINT: retokenize with a larger "
            "--val-fraction, or use another split"
        )

    @property
    def _field(self) -> Tokens:
        found = self.declared["tokens"]
        assert isinstance(found, Tokens)  # checked when opened
        return found

    @property
    def vocab_size(self) -> int:
        return self._field.vocab_size

    @property
    def eot_id(self) -> int | None:
        return self._field.eot_id

    @cached_property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self.store.manifest.arrays["tokens"].dtype)

    @cached_property
    def _token_starts(self) -> np.ndarray:
        """Cumulative token counts of the split, one entry per shard plus one."""
        shards = self.store.manifest.shards
        return np.cumsum([0] + [shards[i].arrays["tokens"].length for i in self._shards])

    @property
    def num_tokens(self) -> int:
        return int(self._token_starts[-1])

    def _array(self, k: int, name: str) -> np.ndarray:
        """Array `name` of the k-th shard of this split."""
        return self.arrays.array(self._shards[k], name)

    def _read(self, start: int, out: np.ndarray) -> None:
        """Fill `out` with the split's tokens from `start` on, across shards if it must."""
        pos, filled = start, 0
        k = int(np.searchsorted(self._token_starts, pos, side="right")) - 1
        while filled < len(out):
            tokens = self._array(k, "tokens")
            local = pos - int(self._token_starts[k])
            n = min(len(out) - filled, len(tokens) - local)
            out[filled : filled + n] = tokens[local : local + n]
            filled, pos, k = filled + n, pos + n, k + 1

    def _read_windows(self, starts: np.ndarray, out: np.ndarray) -> None:
        """Fill row r of `out` (n, width) with the tokens from starts[r] on: one gather per shard
        for the windows that lie inside it, a piecewise read for those that cross an end."""
        width = out.shape[1]
        k = np.searchsorted(self._token_starts, starts, side="right") - 1
        inside = starts + width <= self._token_starts[k + 1]
        for shard in np.unique(k[inside]).tolist():
            rows = np.flatnonzero(inside & (k == shard))
            local = starts[rows] - self._token_starts[shard]
            out[rows] = self._array(shard, "tokens")[local[:, None] + np.arange(width)]
        for row in np.flatnonzero(~inside).tolist():
            self._read(int(starts[row]), out[row])


class TokenWindowDataset(_TokenSplit):
    """Training windows over one split: item i is (x, y), int64 (block_size,) each, where x is
    the split's tokens [i * stride, i * stride + block_size) and y the same shifted by one.

    Windows run over document ends (the end-of-document token marks them, as in GPT-2
    training) and over shard ends (the split is one stream). `len(ds)` is the number of whole
    windows; the stride defaults to block_size, so the windows cover the split once.
    Use `make_loader` (or `collate_fn=collate_batch`) to keep the batched `__getitems__`.
    `index=True` adds the window's index, int64 (), as a third item (for loaders.transforms)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        block_size: int,
        split: str = "train",
        stride: int | None = None,
        *,
        max_open: int = DEFAULT_MAX_OPEN,
        index: bool = False,
        **remote: Unpack[Remote],
    ):
        super().__init__(root, split, max_open, **remote)
        if block_size < 1 or (stride is not None and stride < 1):
            raise ValueError(f"block_size {block_size} and stride {stride} must be positive")
        self.block_size, self.with_index = block_size, index
        self.stride = stride or block_size
        n = self.num_tokens - block_size - 1  # the last window must still have its y
        self._len = n // self.stride + 1 if n >= 0 else 0
        if self._len == 0:
            raise ValueError(
                f"{self.store.root} split {split!r} has {self.num_tokens} tokens, too few for one "
                f"window of {block_size} + 1. HINT: a smaller block_size, or more text"
            )

    def __len__(self) -> int:
        return self._len

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("x", "y", "index") if self.with_index else ("x", "y")

    @property
    def shard_sizes(self) -> list[int]:
        """Windows per shard of the split, each counted in the shard it starts in (for order
        "quasi_random": a window of shards at a time, but for the windows over their ends)."""
        first = -(-self._token_starts // self.stride)  # each shard's first window: a ceil
        return np.diff(np.minimum(first, len(self))).tolist()

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        self.store.check()  # a repacked folder: refuse it rather than mix two datasets
        idx = check_indices(indices, len(self))
        buf = np.empty((len(idx), self.block_size + 1), self.dtype)
        self._read_windows(idx * self.stride, buf)
        x = new_batch((len(idx), self.block_size), getattr(torch, OUT_DTYPE))
        y = new_batch((len(idx), self.block_size), getattr(torch, OUT_DTYPE))
        x.numpy()[:] = buf[:, :-1]
        y.numpy()[:] = buf[:, 1:]
        return Batch((x, y, torch.from_numpy(idx)) if self.with_index else (x, y))

    def __repr__(self) -> str:
        return (
            f"TokenWindowDataset({str(self.store.root)!r}, block_size={self.block_size}, "
            f"split={self.split!r}, stride={self.stride}, windows={len(self)}, "
            f"tokens={self.num_tokens}, vocab_size={self.vocab_size})"
        )


class DocumentDataset(_TokenSplit):
    """The documents of one split, in order: item i is its tokens, int64 (length,), without the
    end-of-document token (so the tokenizer decodes it to the document's text exactly).

    `index=True` makes item i (tokens, index), the index int64 () (as TokenWindowDataset's):
    to know which documents a run has seen. Documents differ in length, so default_collate
    (make_loader's) stacks batches of one: (1, length) and (1,); for longer batches pass a
    collate_fn of your own (`collate_fn=list`: the batch's items as they are)."""

    itemized = True  # documents differ in length: read one at a time

    @property
    def outputs(self) -> tuple[str, ...]:
        return ("tokens", "index") if self.with_index else ("tokens",)

    def __init__(
        self,
        root: str | os.PathLike[str],
        split: str = "val",
        *,
        max_open: int = DEFAULT_MAX_OPEN,
        index: bool = False,
        **remote: Unpack[Remote],
    ):
        super().__init__(root, split, max_open, **remote)
        self.with_index = index

    def span(self, index: int) -> tuple[int, int]:
        """The document's [start, end) in the split's token stream, its end-of-document token
        included."""
        self.store.check()
        i = int(check_indices([index], len(self))[0])
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        offsets = self._array(k, "tokens" + OFFSETS)
        local = i - int(self._starts[k])
        base = int(self._token_starts[k])
        return base + int(offsets[local]), base + int(offsets[local + 1])

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        return [self[i] for i in indices]  # documents differ in length: read one at a time

    # Any: a tensor, or (tensor, index) with index=True; either form type-checks at the caller.
    def __getitem__(self, index: int) -> Any:
        start, end = self.span(index)
        out = np.empty(end - start, self.dtype)
        if len(out):
            self._read(start, out)
        # prep ends every document with eot_id (when the tokenizer has one): the text is before
        # it. An empty document, or one written without it, has nothing to take off.
        if self.eot_id is not None and len(out) and out[-1] == self.eot_id:
            out = out[:-1]
        tokens = torch.from_numpy(out.astype(OUT_DTYPE))
        if not self.with_index:
            return tokens
        return tokens, torch.tensor(int(index) % len(self), dtype=torch.int64)  # span checked it

    def __repr__(self) -> str:
        return (
            f"DocumentDataset({str(self.store.root)!r}, split={self.split!r}, "
            f"documents={len(self)}, tokens={self.num_tokens}, vocab_size={self.vocab_size})"
        )
