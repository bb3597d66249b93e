"""The type rules of a table column (docs/format.md, table datasets): what the scan gathers of each
block (Stats), the stored type decided once over every row (decide), a block encoded in it. A
block's kind is null < bool, int < float, time, string; the blocks' kinds combine (int and float
give float, any other mix gives string)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from loaders.format.spec import smallest_uint
from prep.media.table.arrow import arrow_bools, arrow_texts, numpy_of, values_of
from prep.run.errors import PrepError

MISSING, UNSEEN, FIRST_CODE = 0, 1, 2
NAT = np.iinfo(np.int64).min
FLOAT16_MAX = 65504.0
MAX_CODES = 2**32  # codes are at most uint32
NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"
NUMERIC = ("bool", "int", "float", "time")


def int_dtype(lo: int, hi: int) -> str:
    """The narrowest integer dtype holding lo..hi.

    >>> int_dtype(0, 255), int_dtype(0, 256), int_dtype(-128, 127), int_dtype(-129, 0)
    ('uint8', 'uint16', 'int8', 'int16')
    """
    if lo >= 0:
        return smallest_uint(hi)
    for bits in (8, 16, 32, 64):
        if -(2 ** (bits - 1)) <= lo and hi < 2 ** (bits - 1):
            return f"int{bits}"
    raise PrepError(f"integers {lo}..{hi} do not fit int64")


def code_dtype(vocab_size: int, column: str = "", first: int = FIRST_CODE) -> str:
    """The narrowest unsigned dtype of codes `first`..vocab_size + first - 1.

    >>> code_dtype(254), code_dtype(255), code_dtype(256, first=0)
    ('uint8', 'uint16', 'uint8')
    """
    top = max(vocab_size + first - 1, 0)
    if top >= MAX_CODES:
        raise PrepError(
            f"column {column}: {vocab_size:,} distinct values do not fit uint32 codes (2^32 - 2 "
            "at most). HINT: --drop the column, or hash it into fewer values before packing"
        )
    return smallest_uint(top)


def float_dtype(float16: bool, amax: float) -> str:
    """float16 when asked and every finite value fits it (|x| <= 65504), else float32."""
    return "float16" if float16 and amax <= FLOAT16_MAX else "float32"


def as_text(arr: pa.Array, rel: str, column: str, first_row: int) -> pa.Array:
    """Binary cells (CSV) as UTF-8 strings; the first invalid one is an error naming its row."""
    t = arr.type
    if pa.types.is_dictionary(t) and pa.types.is_binary(t.value_type):
        try:
            return arr.cast(pa.dictionary(t.index_type, pa.string()))
        except pa.ArrowInvalid:
            arr = arr.dictionary_decode()  # to name the row
    if not pa.types.is_binary(arr.type):
        return arr
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        for i, value in enumerate(arr.to_pylist()):
            try:
                _ = value is None or value.decode("utf-8")
            except UnicodeDecodeError:
                raise PrepError(
                    f"{rel}: row {first_row + i}, column {column}: not UTF-8 "
                    f"({value[:20]!r}). HINT: convert the file to UTF-8 (iconv -t utf-8)"
                ) from None
        raise


def _casts(arr: pa.Array, to: pa.DataType) -> bool:
    """Whether every cell converts (the first 64 tried first: a failing cast costs a pass)."""
    try:
        arr.drop_null().slice(0, 64).cast(to)
        arr.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def classify(arr: pa.Array, values: pa.Array | None = None) -> str:
    """The kind of one block of a column; `values`: a text block's distinct values."""
    t = arr.type
    if arr.null_count == len(arr) or pa.types.is_null(t):
        return "null"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_temporal(t):
        return "time"
    if pa.types.is_dictionary(t) and not pa.types.is_string(t.value_type):
        return "string"
    if pa.types.is_dictionary(t):
        values = arr.dictionary if values is None else values
    elif not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise PrepError(f"type {t} is not a table type prep packs (nested?)")
    cells = arr.drop_null() if values is None else values
    for kind, to in (("int", pa.int64()), ("float", pa.float64())):
        if _casts(cells, to):
            return kind
    if pc.all(pc.is_in(pc.utf8_lower(cells), arrow_texts(["true", "false"]))).as_py():
        return "bool"
    return "time" if _casts(cells, pa.timestamp("ns")) else "string"


def as_dictionary(arr: pa.Array) -> pa.Array:
    """Text cells as a dictionary array of strings (numbers as their text)."""
    if pa.types.is_dictionary(arr.type) and pa.types.is_string(arr.type.value_type):
        return arr
    return pc.dictionary_encode(arr if pa.types.is_string(arr.type) else arr.cast(pa.string()))


def combine(a: str, b: str) -> str:
    if a == b or b == "null":
        return a
    if a == "null":
        return b
    return "float" if {a, b} == {"int", "float"} else "string"


def as_float(arr: pa.Array, kind: str) -> np.ndarray:
    """A numeric-kind block as float64 with NaN for missing (statistics, float storage)."""
    if kind == "bool":
        arr = pc.equal(pc.utf8_lower(arr), "true") if pa.types.is_string(arr.type) else arr
        arr = arr.cast(pa.uint8())
    elif kind == "time":
        arr = arr.cast(pa.timestamp("ns")).cast(pa.int64())
    return filled(arr.cast(pa.float64(), safe=False), np.nan)


def filled(arr: pa.Array, value: Any) -> np.ndarray:
    """The cells as numpy, `value` for missing (no copy when none is missing)."""
    return numpy_of(arr.fill_null(value) if arr.null_count else arr)


@dataclass
class Column:
    """One column as stored (its manifest entry: docs/format.md); `role`: num, cat or target."""

    name: str
    role: str
    kind: str = "null"
    dtype: str = "float32"
    missing: int = 0
    lo: float | None = None
    hi: float | None = None
    mean: float | None = None
    std: float | None = None
    vocab: list[str] | None = None
    counts: list[int] | None = None
    first_code: int | None = None  # a coded target's: 0 (class ids); others FIRST_CODE


def kept_form(arr: pa.Array, float16: bool) -> pa.Array:
    """Floats as float32 unless --float16 (rounded once, from the parsed value); others as is."""
    if pa.types.is_floating(arr.type) and arr.type != pa.float32() and not float16:
        return arr.cast(pa.float32(), safe=False)  # no range check: out of range is inf
    return arr


def encode(arr: pa.Array, col: Column, vocab: pa.Array | None = None) -> np.ndarray:
    """One block of a column in its stored dtype. `vocab`: the column's vocabulary (coded)."""
    if col.vocab is not None:  # coded
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
            return numpy_of(arr).astype(col.dtype)
        if col.kind == "int":
            return numpy_of(arr.cast(pa.int64())).astype(col.dtype)
    return x.astype(col.dtype)


def _codes(arr: pa.Array, vocab: pa.Array, dtype: np.dtype[Any], first: int) -> np.ndarray:
    """Codes of a block, each distinct value looked up once; vocab[0] is code `first`."""
    enc = as_dictionary(arr)
    pos = pc.index_in(enc.dictionary, value_set=vocab)  # null: not in the train vocabulary
    lut = np.where(values_of(pos.is_valid()), values_of(pos).astype(np.int64) + first, UNSEEN)
    idx = filled(enc.indices, len(lut))
    return np.append(lut, MISSING).astype(dtype)[idx]


@dataclass
class Stats:
    """What the scan gathers of one column, block by block."""

    kind: str = "null"
    rows: int = 0
    missing: int = 0
    numeric: int = 0  # values that look like numbers (the 'N/A' rule)
    bad: tuple[str, int, str] | None = None  # the first text that is not a number: where
    where: str = ""  # the first file with a block of text
    lo: float = np.inf
    hi: float = -np.inf
    amax: float = 0.0
    sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # train n, sum, sum sq
    counts: list[tuple[pa.Array, np.ndarray]] = field(default_factory=list)  # a text block's
    # train values and how often each occurs, per block
    typed: bool = False  # a block had numbers, times or booleans (not counted as text)

    def update(
        self, arr: pa.Array, train: np.ndarray, at: tuple[str, int], coded: bool
    ) -> pa.Array:
        """Add one block; `at`: (file, row of its start). The cells as the tasks encode them."""
        t = arr.type
        text = pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t)
        enc = as_dictionary(arr) if text or coded else None
        kind = classify(arr, enc.dictionary if text and enc is not None else None)
        if pa.types.is_dictionary(t) and kind in NUMERIC:
            arr = arr.dictionary_decode()  # text holding numbers (not from CSV: typed by pyarrow)
        self.kind = combine(self.kind, kind)
        self.rows += len(arr)
        self.missing += arr.null_count
        if kind in NUMERIC:
            self._numbers(arr, kind, train)
        if (kind == "string" or coded) and enc is not None:
            counts = self._count(enc, train)
            if kind == "string" and text and not coded:
                self._looks(enc, counts, at)
            arr = enc
        if kind == "string" and not self.where:
            self.where = at[0]
        return arr

    def merge(self, other: Stats, offset: int) -> None:
        """Add the next block's; `offset`: rows before it in its file its row numbers left out."""
        self.kind = combine(self.kind, other.kind)
        self.rows += other.rows
        self.missing += other.missing
        self.numeric += other.numeric
        if self.bad is None and other.bad is not None:
            self.bad = other.bad[0], other.bad[1] + offset, other.bad[2]
        self.where = self.where or other.where
        self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)
        self.amax = max(self.amax, other.amax)
        self.sums = [a + b for a, b in zip(self.sums, other.sums, strict=True)]
        self.counts += other.counts
        self.typed |= other.typed

    def _looks(self, enc: pa.Array, counts: np.ndarray, at: tuple[str, int]) -> None:
        """Count the cells that look like numbers; keep the first that does not."""
        looks = numpy_of(pc.match_substring_regex(enc.dictionary, NUMBER))
        self.numeric += int(counts[looks].sum())
        if self.bad is None and not looks.all():
            codes = filled(enc.indices, len(looks))
            i = int(np.flatnonzero(~np.append(looks, True)[codes])[0])
            self.bad = at[0], at[1] + i, str(enc.dictionary[codes[i]].as_py())

    def _numbers(self, arr: pa.Array, kind: str, train: np.ndarray) -> None:
        x = as_float(arr, kind)
        self.typed = True
        if kind != "time":
            self.numeric += len(arr) - arr.null_count
        with np.errstate(all="ignore"):  # inf - inf, or an overflow: then a check per cell
            total = x.sum()  # finite: every cell is (the common block: no mask, no copy)
        ok = None if np.isfinite(total) else np.isfinite(x)
        finite = x if ok is None else x[ok]
        if finite.size:
            lo, hi = finite.min(), finite.max()
            self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
            self.amax = max(self.amax, float(max(-lo, hi)))  # the largest |x|
        t = x if ok is None and train.all() else x[train if ok is None else train & ok]
        total = total if t is x else t.sum()
        self.sums = [self.sums[0] + t.size, self.sums[1] + total, self.sums[2] + np.dot(t, t)]

    def _count(self, enc: pa.Array, train: np.ndarray) -> np.ndarray:
        """Add the train rows' values; return every row's count per distinct value."""
        n = len(enc.dictionary)
        codes = filled(enc.indices, n)
        every = np.bincount(codes, minlength=n + 1)[:n]
        mine = every if train.all() else np.bincount(codes[train], minlength=n + 1)[:n]
        seen = mine > 0
        self.counts.append((enc.dictionary.filter(arrow_bools(seen)), mine[seen]))
        return every

    def vocab(self) -> tuple[list[str], list[int]]:
        """The train values in sorted order (by code point: UTF-8's byte order), their counts."""
        if not self.counts:
            return [], []
        values, n = zip(*self.counts, strict=True)
        enc = pc.dictionary_encode(pa.concat_arrays(values))  # each value once
        total = np.zeros(len(enc.dictionary), np.int64)
        np.add.at(total, values_of(enc.indices), np.concatenate(n))
        order = pc.sort_indices(enc.dictionary)
        return enc.dictionary.take(order).to_pylist(), total[values_of(order)].tolist()


def decide(name: str, role: str, coded: bool, st: Stats, float16: bool) -> Column:
    """The stored column from its statistics; `role`: num or target, `coded`: --categorical."""
    col = Column(name, role, st.kind, missing=st.missing)
    if coded or st.kind == "string":
        col.role = "cat" if role == "num" else role
        texts = st.rows - st.missing
        if not coded and st.bad is not None and 2 * st.numeric > texts:
            rel, row, value = st.bad
            raise PrepError(
                f"{rel}: row {row}, column {name}: {value!r} is not a number ({st.numeric:,} "
                f"of {texts:,} values are). HINT: --na-values {value} declares it missing, or "
                f"--categorical {name} keeps the column as text"
            )
        if not coded and st.typed:
            raise PrepError(
                f"{st.where}: column {name} holds numbers in some rows and text in others. "
                f"HINT: --categorical {name} packs it as text codes"
            )
        col.vocab, col.counts = st.vocab()
        col.first_code = 0 if role == "target" else None
        col.dtype = code_dtype(len(col.vocab), name, FIRST_CODE if role != "target" else 0)
        return col
    if np.isfinite(st.lo):
        col.lo, col.hi = float(st.lo), float(st.hi)
    n, s, sq = st.sums
    if n:
        col.mean = s / n
        col.std = float(np.sqrt(max(sq / n - col.mean**2, 0.0)))
    if st.kind == "time":
        col.dtype = "int64"
    elif st.kind in ("int", "bool") and st.missing == 0:
        col.dtype = int_dtype(int(st.lo), int(st.hi)) if col.lo is not None else "uint8"
    else:
        col.dtype = float_dtype(float16, st.amax)
    return col
