"""Token ids: a document's (or a text field's) ids, ragged, below the field's vocabulary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, FieldError, Piece, Reading, as_array, ragged_batch, spec
from loaders.format.spec import UNSIGNED, ArraySpec, count, is_sha256, smallest_uint

# prep tokenize --chat: an `Array("uint8", (None,))` field beside the tokens, ragged as they are,
# 1 on the tokens trained on (the assistant's); PackedDataset puts IGNORE in labels elsewhere
LOSS_MASK = "loss_mask"


@dataclass(frozen=True)
class Tokens(Field):
    """Token ids below `vocab_size` in the smallest unsigned dtype, read as int64; `tokenizer`: its
    file in the dataset's folder; `eot_id`: what ends each document (None: none)."""

    vocab_size: int = 0
    tokenizer: str | None = None
    eot_id: int | None = None
    tokenizer_name: str | None = None
    tokenizer_sha256: str | None = None
    kind = "tokens"

    def __post_init__(self) -> None:
        # its ids are stored in uint8..uint32 (dtypes): 2**64 once overflowed prep report
        if not count(self.vocab_size) or not 1 <= self.vocab_size <= 2**32:
            raise ValueError(f"vocab_size {self.vocab_size!r:.40} is not 1..2**32")
        if self.eot_id is not None and not (count(self.eot_id) and self.eot_id < self.vocab_size):
            raise ValueError(f"eot_id {self.eot_id!r} is not null or an id below {self.vocab_size}")
        file, sha = self.tokenizer, self.tokenizer_sha256
        if not (file is None or (isinstance(file, str) and file)):
            raise ValueError(f"tokenizer {file!r:.40} is not a file name")
        if not (sha is None or is_sha256(sha)):
            raise ValueError(f"tokenizer_sha256 {str(sha)[:70]!r} is not a digest")

    def arrays(self, name: str) -> list[ArraySpec]:
        return [spec(name, "tokens", smallest_uint(max(255, self.vocab_size - 1)), (), "ragged")]

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            value = value.astype(np.int64)  # any integer ids: their range is checked below
        ids = as_array(value, np.dtype("int64"))
        if ids.ndim != 1:
            raise FieldError("field_shape", f"token ids of shape {list(ids.shape)}, not (n,)")
        if len(ids) and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise FieldError("bad_token", f"a token id is not 0..{self.vocab_size - 1}")
        return {"": ids.astype(self.arrays("")[0].dtype)}

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        pieces = [p.astype(np.int64) for p in batch.pieces(name)]
        return ragged_batch(name, pieces, (), policy)

    def dtypes(self, declared: ArraySpec) -> tuple[str, ...]:
        return UNSIGNED[:3]

    def read_dtype(self, declared: ArraySpec) -> str:
        return "int64"

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        return piece(name).astype(np.int64)

    def caption(self, value: Any) -> str:
        return f"{len(value):,} tokens"

    def limits(self, name: str) -> dict[str, tuple[int, str]]:
        return {
            name: (self.vocab_size - 1, f"token id {{v}} is not below vocab_size {self.vocab_size}")
        }

    def files(self, name: str) -> dict[str, str | None]:
        return {} if self.tokenizer is None else {self.tokenizer: self.tokenizer_sha256}

    def lines(self, name: str, m: Any) -> list[str]:
        """Its tokenizer, then each split's tokens and documents (samples)."""
        said = f" ({self.tokenizer})" if self.tokenizer else ""
        lines = [
            f"{name}: tokenizer {self.tokenizer_name or '?'}{said}, vocabulary {self.vocab_size}, "
            f"end-of-document id {self.eot_id}"
        ]
        per: dict[str, list[int]] = {}
        for shard in m.shards:
            n = per.setdefault(shard.split or "all", [0, 0, 0])
            n[0], n[1], n[2] = n[0] + shard.arrays[name].length, n[1] + shard.count, n[2] + 1
        for split, (tokens, docs, shards) in per.items():
            lines.append(f"{split}: {tokens:,} tokens in {docs:,} documents, {shards} shards")
        return lines
