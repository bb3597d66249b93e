"""A column's cells in their stored dtype (the rules of prep.kinds.table.types), one block at a
time, and the arrow type a shard task's CSV parser reads each column as."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prep.kinds.table.types import MISSING, NAT, UNSEEN, Column, as_float

ARROW = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "time": pa.timestamp("ns")}


def arrow_type(col: Column) -> pa.DataType:
    """What a shard task's CSV parser reads the column as: its codes' text as a dictionary."""
    if col.coded:
        return pa.dictionary(pa.int32(), pa.string())
    return ARROW.get(col.kind, pa.float64())


def encode(arr: pa.Array, col: Column, lookup: dict[str, int] | None = None) -> np.ndarray:
    """One block of a column in its stored dtype. `lookup`: value -> code (coded columns)."""
    if col.coded:
        assert lookup is not None
        return _codes(arr, lookup, np.dtype(col.dtype))
    if col.kind == "time":
        ns = arr.cast(pa.timestamp("ns")).cast(pa.int64()).fill_null(NAT)
        return np.asarray(ns, dtype=np.int64)
    x = as_float(arr, col.kind) if col.kind != "null" else np.full(len(arr), np.nan)
    if np.dtype(col.dtype).kind in "iu":
        if col.kind in ("int", "bool") and pa.types.is_integer(arr.type):
            return np.asarray(arr, dtype=np.int64).astype(col.dtype)
        if col.kind == "int":
            return np.asarray(arr.cast(pa.int64()), dtype=np.int64).astype(col.dtype)
    return x.astype(col.dtype)


def _codes(arr: pa.Array, lookup: dict[str, int], dtype: np.dtype[Any]) -> np.ndarray:
    """Codes of a block: each distinct value looked up once (not once a row)."""
    if pa.types.is_dictionary(arr.type):
        enc = arr
    else:
        enc = pc.dictionary_encode(arr if pa.types.is_string(arr.type) else arr.cast(pa.string()))
    lut = np.array([lookup.get(v, UNSEEN) for v in enc.dictionary.to_pylist()] + [MISSING], dtype)
    idx = np.asarray(enc.indices.fill_null(len(enc.dictionary)), dtype=np.int64)
    return lut[idx]
