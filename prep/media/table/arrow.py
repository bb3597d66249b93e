"""Arrow arrays to numpy and back through their buffers. pyarrow's own ways (to_numpy,
np.asarray, pa.array, a Python scalar in a compute call) import pandas the first time, a fifth
of a second of CPU in each run of `prep table`, spent while every other thread waits."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def whole(col: pa.ChunkedArray) -> pa.Array:
    """A table's column as one array: its chunk where it has one (combine_chunks copies it)."""
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def values_of(arr: pa.Array) -> np.ndarray:
    """A fixed-width array's data as numpy, whatever its missing cells hold (no copy but a
    boolean's)."""
    t = arr.type
    if pa.types.is_boolean(t):
        if not len(arr):
            return np.zeros(0, bool)
        bits = np.frombuffer(arr.buffers()[1], np.uint8)
        end = arr.offset + len(arr)
        return np.unpackbits(bits, count=end, bitorder="little")[arr.offset :].view(bool)
    kind = "f" if pa.types.is_floating(t) else "i" if pa.types.is_signed_integer(t) else "u"
    dtype = np.dtype(f"{kind}{t.bit_width // 8}")
    if not len(arr):
        return np.zeros(0, dtype)
    return np.frombuffer(arr.buffers()[1], dtype, len(arr), arr.offset * dtype.itemsize)


def numpy_of(arr: pa.Array) -> np.ndarray:
    """A number or boolean array without missing cells as numpy (others: pyarrow's way)."""
    t = arr.type
    fixed = pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)
    return values_of(arr) if fixed and not arr.null_count else np.asarray(arr)


def arrow_bools(mask: np.ndarray) -> pa.Array:
    """A numpy boolean array as Arrow's."""
    bits = np.packbits(np.asarray(mask, bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def arrow_texts(values: list[str]) -> pa.Array:
    """Strings as an Arrow string array."""
    data = [v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, np.int64)
    np.cumsum([len(b) for b in data], out=offsets[1:])
    if offsets[-1] >= 2**31:  # past 32-bit offsets: pyarrow's way
        return pa.array(values, pa.string())
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(pa.string(), len(data), buffers)
