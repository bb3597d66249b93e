"""Token datasets (`prep tokenize`): a split's shards as one stream, in windows or documents."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar, Unpack

import numpy as np
import torch

from loaders.datasets.base import Remote, ShardedDataset
from loaders.fields.tokens import Tokens
from loaders.format import OFFSETS, chunks, kept
from loaders.read.buffers import new_batch
from loaders.read.loader import Batch

OUT_DTYPE = "int64"  # what windows and documents come out as: what embeddings index with
# A raw pack's blocks for order="chunk_random": the chunk prep's --compress zstd would cut
# (prep.run.shardwriter.CHUNK_BYTES), so raw and compressed packs read in one order
RAW_CHUNK_BYTES = 1 << 18


class _TokenSplit(ShardedDataset):
    """One split of a token dataset (`_starts` counts documents); a batch holds `holds`."""

    unsplit = ("documents", "retokenize with a larger --val-fraction, or use another split")
    holds: ClassVar[tuple[str, ...]] = ("tokens",)

    def __init__(
        self,
        root: str | os.PathLike[str],
        split: str = "val",
        *,
        index: bool = False,
        **store: Unpack[Remote],
    ):
        super().__init__(root, split=split, **store)
        tokens = self.declared.get("tokens")
        if not isinstance(tokens, Tokens):
            raise ValueError(f"{self.store.root} has no token stream (packed by prep tokenize)")
        self.vocab_size, self.eot_id = tokens.vocab_size, tokens.eot_id
        self.with_index = index
        self.fields = (*self.holds, "index") if index else self.holds

    @cached_property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self.store.manifest.arrays["tokens"].dtype)

    @cached_property
    def _token_starts(self) -> np.ndarray:  # cumulative token counts of the split's shards
        shards = self.store.manifest.shards
        return np.cumsum([0] + [shards[i].arrays["tokens"].length for i in self._shards])

    @property
    def num_tokens(self) -> int:
        return int(self._token_starts[-1])

    def _read(self, start: int, out: np.ndarray) -> None:
        """Fill `out` with the split's tokens from `start` on, across shards if it must."""
        pos, filled = start, 0
        k = int(np.searchsorted(self._token_starts, pos, side="right")) - 1
        while filled < len(out):
            tokens = self.arrays.array(self._shards[k], "tokens")
            local = pos - int(self._token_starts[k])
            n = min(len(out) - filled, len(tokens) - local)
            out[filled : filled + n] = tokens[local : local + n]
            filled, pos, k = filled + n, pos + n, k + 1


class TokenWindowDataset(_TokenSplit):
    """Item i: (x, y), int64 (block_size,), the tokens from i * stride, y shifted by one.

    Examples:
        >>> from loaders import TokenWindowDataset
        >>> ds = TokenWindowDataset("data/demo-tokens", block_size=64, split="train")
        >>> x, y = ds[0]
        >>> bool((x[1:] == y[:-1]).all())  # y is x shifted by one token
        True
    """

    holds = ("x", "y")

    def __init__(
        self,
        root: str | os.PathLike[str],
        block_size: int,
        split: str = "train",
        stride: int | None = None,
        *,
        index: bool = False,
        **store: Unpack[Remote],
    ):
        super().__init__(root, split, index=index, **store)
        if block_size < 1 or (stride is not None and stride < 1):
            raise ValueError(f"block_size {block_size} and stride {stride} must be positive")
        self.block_size = block_size
        self.stride = stride or block_size
        n = self.num_tokens - block_size - 1  # the last window must still have its y
        if n < 0:
            raise ValueError(
                f"{self.store.root} split {split!r} has {self.num_tokens} tokens, too few for one "
                f"window of {block_size} + 1. HINT: a smaller block_size, or more text"
            )
        self._len = n // self.stride + 1

    def __len__(self) -> int:
        return self._len

    @property
    def shard_sizes(self) -> list[int]:
        """Windows per shard, each counted in the shard it starts in (for "quasi_random")."""
        first = -(-self._token_starts // self.stride)  # each shard's first window: a ceil
        return np.diff(np.minimum(first, len(self))).tolist()

    @cached_property
    def _chunk_tokens(self) -> int:
        """Tokens a chunk of the token arrays holds (raw: as --compress zstd would cut them)."""
        spec = self.store.manifest.arrays["tokens"]
        return spec.chunk or max(1, RAW_CHUNK_BYTES // self.dtype.itemsize)

    @property
    def chunk_sizes(self) -> list[int]:
        """Windows per chunk of each shard, in index order: the blocks of order="chunk_random".
        A window is counted in the chunk it starts in (the last few reach into the next). E.g.
        shards of 10 and 7 tokens, chunks of 4, block_size 2, stride 2: 8 windows, starting at
        0, 2, .. 14; chunks start at 0, 4, 8 | 10, 14; sizes [2, 2, 1, 2, 1]. Chunks no window
        starts in are left out."""
        ends = self._token_starts[1:].tolist()
        cuts = [
            cut
            for start, end in zip(self._token_starts[:-1].tolist(), ends, strict=True)
            for cut in range(start, end, self._chunk_tokens)
        ]
        first = -(-np.asarray([*cuts, ends[-1]], dtype=np.int64) // self.stride)  # a ceil
        sizes = np.diff(np.minimum(first, len(self)))
        return sizes[sizes > 0].tolist()  # (a chunk no window starts in: none in a window)

    @property
    def chunk_window(self) -> int:
        """Chunks a window of order="chunk_random" holds by default: two windows fit in the
        chunks a process keeps decompressed (loaders.format.kept: a chunk a slot)."""
        return max(1, kept.slots() // 2)

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        idx = self._checked(indices)
        starts, width = idx * self.stride, self.block_size + 1
        buf = np.empty((len(idx), width), self.dtype)  # row r: the tokens from starts[r] on
        k = np.searchsorted(self._token_starts, starts, side="right") - 1
        inside = starts + width <= self._token_starts[k + 1]
        for shard in np.unique(k[inside]).tolist():  # a gather a shard at a time
            rows = np.flatnonzero(inside & (k == shard))
            local = starts[rows] - self._token_starts[shard]
            tokens = self.arrays.array(self._shards[shard], "tokens")
            if isinstance(tokens, chunks.Chunked):  # finds its chunks from the starts alone
                buf[rows] = tokens.windows(local, width)
            else:
                buf[rows] = tokens[local[:, None] + np.arange(width)]
        for row in np.flatnonzero(~inside).tolist():  # across a shard boundary
            self._read(int(starts[row]), buf[row])
        x, y = (new_batch((len(idx), self.block_size), getattr(torch, OUT_DTYPE)) for _ in range(2))
        x.numpy()[:], y.numpy()[:] = buf[:, :-1], buf[:, 1:]
        return Batch((x, y, self._index(idx)) if self.with_index else (x, y))

    def _shown(self) -> dict[str, Any]:
        said = dict(block_size=self.block_size, split=self.split, stride=self.stride)
        return said | dict(windows=len(self), tokens=self.num_tokens, vocab_size=self.vocab_size)


class DocumentDataset(_TokenSplit):
    """The documents of one split, in order: item i is its tokens, int64 (length,), without the
    end-of-document token (the tokenizer decodes it to the text exactly); with `index=True`,
    (tokens, i). Documents differ in length: batch them with `collate_fn=list`, or by one.

    Examples:
        >>> from loaders import DocumentDataset
        >>> from prep.media.text.tokenizers import load_tokenizer
        >>> docs = DocumentDataset("data/demo-tokens", split="val")
        >>> text = load_tokenizer("data/demo-tokens").decode(docs[0])
        >>> docs[0].dtype
        torch.int64
    """

    itemized = True

    def span(self, index: int) -> tuple[int, int]:
        """The document's [start, end) in the split's stream, its end-of-document token in."""
        i = int(self._checked([index])[0])
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        offsets = self.arrays.array(self._shards[k], "tokens" + OFFSETS)
        local = i - int(self._starts[k])
        base = int(self._token_starts[k])
        return base + int(offsets[local]), base + int(offsets[local + 1])

    def __getitem__(self, index: int) -> Any:
        start, end = self.span(index)
        out = np.empty(end - start, self.dtype)
        self._read(start, out)  # (an empty document: nothing read)
        # prep ends every document with eot_id (when the tokenizer has one): not an empty one
        if self.eot_id is not None and len(out) and out[-1] == self.eot_id:
            out = out[:-1]
        tokens = torch.from_numpy(out.astype(OUT_DTYPE))
        if not self.with_index:
            return tokens
        return tokens, torch.tensor(int(index) % len(self), dtype=torch.int64)  # span checked it

    def _shown(self) -> dict[str, Any]:
        said = dict(documents=len(self), tokens=self.num_tokens, vocab_size=self.vocab_size)
        return dict(split=self.split, **said)
