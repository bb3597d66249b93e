"""Which rows go to "val": a 64-bit hash of the row's --key cells (or all) below `val_fraction *
2**64`, of the cells' text alone (reordering the inputs never moves a row). A cell's UTF-8 bytes
b_i give sum(b_i * P**i) mod 2**64, a column's from one running sum over its data buffer, mixed
with the length by splitmix64."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prep.media.table.arrow import numpy_of, whole

P = np.uint64(0x100000001B3)  # odd, so that it has an inverse mod 2**64
P_INV = np.uint64(pow(int(P), -1, 2**64))
NULL_HASH = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A bijective 64-bit mixer (Steele, Lea and Flood's SplitMix64 finaliser)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _powers(base: np.uint64, n: int) -> np.ndarray:
    out = np.full(n, base, dtype=np.uint64)
    if n:
        out[0] = 1
    with np.errstate(over="ignore"):
        return np.cumprod(out, dtype=np.uint64)


def cell_hash(arr: pa.Array) -> np.ndarray:
    """uint64 per cell of a column, from its text (numbers as pyarrow writes them). Repeated
    values are hashed once each, then looked up per row (a fifth of the cost)."""
    if pa.types.is_dictionary(arr.type):
        return _by_value(arr)
    if not (pa.types.is_binary(arr.type) or pa.types.is_string(arr.type)):
        enc = pc.dictionary_encode(arr)  # bitwise: -0.0 is not 0.0, as their texts differ
        if 2 * len(enc.dictionary) < len(arr):  # never for a dictionary itself: no loop
            return _by_value(enc)
    if not pa.types.is_binary(arr.type):
        arr = arr.cast(pa.string()).cast(pa.binary())
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int32, n + 1, 4 * arr.offset).astype(np.int64)
    data_buf = arr.buffers()[2] or b""  # None (or empty) when no cell has a byte
    data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]
    offsets -= offsets[0]
    with np.errstate(over="ignore"):
        run = np.zeros(len(data) + 1, dtype=np.uint64)
        np.cumsum(data.astype(np.uint64) * _powers(P, len(data)), out=run[1:])
        inv = _powers(P_INV, len(data) + 1)
        h = (run[offsets[1:]] - run[offsets[:-1]]) * inv[offsets[:-1]]
        h = splitmix64(h ^ splitmix64(np.diff(offsets).astype(np.uint64)))
    valid = numpy_of(arr.is_valid())
    return np.where(valid, h, NULL_HASH)


def _by_value(enc: pa.DictionaryArray) -> np.ndarray:
    """cell_hash of a dictionary array: its values' hashes, looked up by each cell's index."""
    values = np.append(cell_hash(enc.dictionary), NULL_HASH)  # the last: a missing cell
    indices = enc.indices.fill_null(len(values) - 1) if enc.null_count else enc.indices
    return values[numpy_of(indices)]


def val_mask(table: pa.Table, columns: list[str], val_fraction: float) -> np.ndarray:
    """True for the rows in "val": the row's hash combines its `columns` in name order."""
    h = np.zeros(table.num_rows, dtype=np.uint64)
    if val_fraction <= 0:
        return h.astype(bool)
    with np.errstate(over="ignore"):
        for name in sorted(columns):
            h = splitmix64(h * np.uint64(31) + cell_hash(whole(table.column(name))))
    return h < np.uint64(int(val_fraction * 2**64))
