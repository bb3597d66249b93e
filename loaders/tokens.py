"""Token datasets written by `prep tokenize`: training windows and whole documents.

A split is the concatenation of its shards' `tokens` arrays, in manifest order. Shard files are
memory-mapped lazily, once per process, and never pickled; a window is one memory-map slice (two
when it spans a shard boundary), so DataLoader workers share the corpus through the page cache.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from loaders.format import FormatError, Manifest, load_manifest, open_array, read_manifest
from loaders.loader import Batch, check_indices, new_batch


class _TokenSplit:
    """The shards of one split of a token dataset, opened lazily per process."""

    def __init__(self, root: str | os.PathLike[str], split: str):
        self.root = Path(root)
        manifest = load_manifest(self.root)
        if manifest.kind != "tokens":
            raise FormatError(f"{self.root} holds {manifest.kind}, not tokens")
        self.split = split
        self._shards = [i for i, s in enumerate(manifest.shards) if s.split == split]
        if not self._shards:
            have = sorted({str(s.split) for s in manifest.shards})
            raise ValueError(
                f"{self.root} has no {split!r} documents; it has splits {have}. HINT: "
                "retokenize with a larger --val-fraction, or use another split"
            )
        self.vocab_size: int = manifest.extra["vocab_size"]
        self.eot_id: int | None = manifest.extra["eot_id"]
        self.dtype = np.dtype(manifest.arrays["tokens"].dtype)
        shards = [manifest.shards[i] for i in self._shards]
        # Cumulative token and document counts of the split, one entry per shard plus one.
        self._token_starts = np.cumsum([0] + [s.arrays["tokens"].length for s in shards])
        self._doc_starts = np.cumsum([0] + [s.count for s in shards])
        self._manifest: Manifest | None = manifest
        self._maps: dict[tuple[int, str], np.ndarray] = {}

    @property
    def num_tokens(self) -> int:
        return int(self._token_starts[-1])

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:  # after unpickling in a worker: validated by the parent
            self._manifest = read_manifest(self.root)
        return self._manifest

    def _array(self, k: int, name: str) -> np.ndarray:
        """Array `name` of the k-th shard of this split, as a read-only memory map."""
        arr = self._maps.get((k, name))
        if arr is None:
            m = self.manifest
            shard = m.shards[self._shards[k]]
            arr = self._maps[(k, name)] = open_array(
                self.root, shard.arrays[name], m.arrays[name], name
            )
        return arr

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

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_manifest"] = None
        state["_maps"] = {}
        return state


class TokenWindowDataset(_TokenSplit, Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Training windows over one split: item i is (x, y), int64 (block_size,) each, where x is
    the split's tokens [i * stride, i * stride + block_size) and y the same shifted by one.

    Windows run over document ends (the end-of-document token marks them, as in GPT-2
    training) and over shard ends (the split is one stream). `len(ds)` is the number of whole
    windows; the stride defaults to block_size, so the windows cover the split once.
    Use `make_loader` (or `collate_fn=collate_batch`) to keep the batched `__getitems__`."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        block_size: int,
        split: str = "train",
        stride: int | None = None,
    ):
        super().__init__(root, split)
        if block_size < 1 or (stride is not None and stride < 1):
            raise ValueError(f"block_size {block_size} and stride {stride} must be positive")
        self.block_size = block_size
        self.stride = stride or block_size
        n = self.num_tokens - block_size - 1  # the last window must still have its y
        self._len = n // self.stride + 1 if n >= 0 else 0
        if self._len == 0:
            raise ValueError(
                f"{self.root} split {split!r} has {self.num_tokens} tokens, too few for one "
                f"window of {block_size} + 1. HINT: a smaller block_size, or more text"
            )

    def __len__(self) -> int:
        return self._len

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        idx = check_indices(indices, len(self))
        buf = np.empty((len(idx), self.block_size + 1), self.dtype)
        for row, i in enumerate(idx):
            self._read(int(i) * self.stride, buf[row])
        x = new_batch((len(idx), self.block_size), torch.int64)
        y = new_batch((len(idx), self.block_size), torch.int64)
        x.numpy()[:] = buf[:, :-1]
        y.numpy()[:] = buf[:, 1:]
        return Batch((x, y))

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.__getitems__([index]).tensors
        return x[0], y[0]

    def __repr__(self) -> str:
        return (
            f"TokenWindowDataset({str(self.root)!r}, block_size={self.block_size}, "
            f"split={self.split!r}, stride={self.stride}, windows={len(self)}, "
            f"tokens={self.num_tokens}, vocab_size={self.vocab_size})"
        )


class DocumentDataset(_TokenSplit, Dataset[torch.Tensor]):
    """The documents of one split, in order: item i is its tokens, int64 (length,), without the
    end-of-document token (so the tokenizer decodes it to the document's text exactly)."""

    def __init__(self, root: str | os.PathLike[str], split: str = "val"):
        super().__init__(root, split)

    def __len__(self) -> int:
        return int(self._doc_starts[-1])

    def span(self, index: int) -> tuple[int, int]:
        """The document's [start, end) in the split's token stream, its end-of-document token
        included."""
        i = int(check_indices([index], len(self))[0])
        k = int(np.searchsorted(self._doc_starts, i, side="right")) - 1
        offsets = self._array(k, "doc_offsets")
        local = i - int(self._doc_starts[k])
        base = int(self._token_starts[k])
        return base + int(offsets[local]), base + int(offsets[local + 1])

    def __getitem__(self, index: int) -> torch.Tensor:
        start, end = self.span(index)
        if self.eot_id is not None:
            end -= 1  # every document ends with the eot token; the text is before it
        out = np.empty(end - start, self.dtype)
        if len(out):
            self._read(start, out)
        return torch.from_numpy(out.astype(np.int64))

    def __repr__(self) -> str:
        return (
            f"DocumentDataset({str(self.root)!r}, split={self.split!r}, documents={len(self)}, "
            f"tokens={self.num_tokens}, vocab_size={self.vocab_size})"
        )
