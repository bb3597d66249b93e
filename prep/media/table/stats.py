"""What the scan gathers of a column, block by block, to decide its stored type
(decide, below): kinds, missing counts, ranges, train sums and values."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prep.media.table.types import (
    FIRST_CODE,
    NUMBER,
    NUMERIC,
    Column,
    as_dictionary,
    as_float,
    classify,
    code_dtype,
    combine,
    filled,
    float_dtype,
    int_dtype,
)
from prep.run.errors import PrepError


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
        """Add one block of the column; `at`: its file and the file's row number of its start.
        Returns the cells as the shard tasks encode them: text as a dictionary."""
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
        """Add the statistics of the next block; `offset`: rows before it in its file that its
        own row numbers left out (0 when they are the file's)."""
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
        looks = np.asarray(pc.match_substring_regex(enc.dictionary, NUMBER))
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
        finite = x[np.isfinite(x)]
        if finite.size:
            self.lo, self.hi = min(self.lo, finite.min()), max(self.hi, finite.max())
            self.amax = max(self.amax, float(np.abs(finite).max()))
        t = x[train & np.isfinite(x)]
        self.sums = [self.sums[0] + t.size, self.sums[1] + t.sum(), self.sums[2] + (t * t).sum()]

    def _count(self, enc: pa.Array, train: np.ndarray) -> np.ndarray:
        """Add the train rows' values; return every row's count per distinct value."""
        n = len(enc.dictionary)
        codes = filled(enc.indices, n)
        mine = np.bincount(codes[train], minlength=n + 1)[:n]
        seen = mine > 0
        self.counts.append((enc.dictionary.filter(pa.array(seen)), mine[seen]))
        return np.bincount(codes, minlength=n + 1)[:n]

    def vocab(self) -> tuple[list[str], list[int]]:
        """The train values in sorted order (by code point: UTF-8's byte order), their counts."""
        if not self.counts:
            return [], []
        values = pa.concat_arrays([v for v, _ in self.counts])
        n = np.concatenate([k for _, k in self.counts])
        total = pa.table({"v": values, "n": n}).group_by("v").aggregate([("n", "sum")])
        total = total.sort_by("v")
        return total["v"].to_pylist(), total["n_sum"].to_pylist()


def decide(name: str, role: str, coded: bool, st: Stats, float16: bool) -> Column:
    """The stored column from its statistics; `role`: num or target, `coded`: --categorical."""
    col = Column(name, role, st.kind, missing=st.missing)
    if coded or st.kind == "string":
        col.role = "cat" if role == "num" else role
        if not coded:
            _check_text(col, st)
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


def _check_text(col: Column, st: Stats) -> None:
    """A text column that is mostly numbers holds a bad value (the first is named); one mixing
    number blocks with text blocks cannot be coded from text counts alone."""
    texts = st.rows - st.missing
    if st.bad is not None and 2 * st.numeric > texts:
        rel, row, value = st.bad
        raise PrepError(
            f"{rel}: row {row}, column {col.name}: {value!r} is not a number ({st.numeric:,} "
            f"of {texts:,} values are). HINT: --na-values {value} declares it missing, or "
            f"--categorical {col.name} keeps the column as text"
        )
    if st.typed:
        raise PrepError(
            f"{st.where}: column {col.name} holds numbers in some rows and text in others. "
            f"HINT: --categorical {col.name} packs it as text codes"
        )
