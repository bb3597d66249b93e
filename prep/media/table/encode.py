"""A column's cells in their stored dtype (the rules of prep.media.table.types), one block at
a time, and the form the scan keeps a parsed block in for the shard tasks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prep.media.table.types import (
    FIRST_CODE,
    MISSING,
    NAT,
    UNSEEN,
    Column,
    as_dictionary,
    as_float,
    filled,
)


def kept_form(arr: pa.Array, float16: bool) -> pa.Array:
    """Floats as float32, the dtype they are stored in whatever the other blocks hold, unless
    --float16 (rounded once, from the parsed value); every other type as parsed."""
    if pa.types.is_floating(arr.type) and arr.type != pa.float32() and not float16:
        return arr.cast(pa.float32(), safe=False)  # no range check: out of range is inf
    return arr


def encode(arr: pa.Array, col: Column, vocab: pa.Array | None = None) -> np.ndarray:
    """One block of a column in its stored dtype. `vocab`: the column's vocabulary (coded)."""
    if col.coded:
        assert vocab is not None
        first = FIRST_CODE if col.first_code is None else col.first_code
        return _codes(arr, vocab, np.dtype(col.dtype), first)
    if col.kind == "time":
        return filled(arr.cast(pa.timestamp("ns")).cast(pa.int64()), NAT)
    if arr.type == pa.float32() and col.dtype == "float32":
        return filled(arr, np.nan)
    x = as_float(arr, col.kind) if col.kind != "null" else np.full(len(arr), np.nan)
    if np.dtype(col.dtype).kind in "iu":
        if col.kind in ("int", "bool") and pa.types.is_integer(arr.type):
            return np.asarray(arr, dtype=np.int64).astype(col.dtype)
        if col.kind == "int":
            return np.asarray(arr.cast(pa.int64()), dtype=np.int64).astype(col.dtype)
    return x.astype(col.dtype)


def _codes(arr: pa.Array, vocab: pa.Array, dtype: np.dtype[Any], first: int) -> np.ndarray:
    """Codes of a block: each distinct value looked up once (not once a row), in one
    vectorised search of the vocabulary; vocab[0] is code `first` (0 for a target's class ids:
    its vocabulary holds every row's value and no row misses it)."""
    enc = as_dictionary(arr)
    pos = pc.index_in(enc.dictionary, value_set=vocab)  # null: not in the train vocabulary
    lut = np.asarray(pc.add(pos.cast(pa.int64()), first).fill_null(UNSEEN), dtype=np.int64)
    idx = filled(enc.indices, len(lut))
    return np.append(lut, MISSING).astype(dtype)[idx]
