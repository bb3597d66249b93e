"""The split hash of a column of repeated values, computed once per distinct value
(prep.sources.hashsplit), equals the hash of every cell's text."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prep.sources.hashsplit import cell_hash


def test_hash_by_value_is_the_hash_of_each_cells_text() -> None:
    rng = np.random.default_rng(0)
    n = 3000
    mask = rng.random(n) < 0.1
    columns = [
        pa.array(rng.choice([0.0, -0.0, np.nan, 1.5, -2.25, 1e20], n), mask=mask),
        pa.array(rng.integers(-3, 3, n), mask=mask),
        pa.array(rng.random(n) < 0.5, mask=mask),
        pa.array(rng.integers(0, 9, n).astype("datetime64[s]")),
        pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 3, n).astype(np.int32), mask=mask), pa.array(["a", None, "bc"])
        ),
        pc.dictionary_encode(pa.array([b"x", b"yy", None, b""] * (n // 4), pa.binary())),
    ]
    for arr in columns:
        text = arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr
        expected = cell_hash(text.cast(pa.string()))  # text: hashed cell by cell
        assert np.array_equal(cell_hash(arr), expected), arr.type
    empty = pa.array([], pa.float64())
    assert cell_hash(empty).shape == (0,)
