"""Per-volume targets of `prep volumes --targets FILE.csv` (and per clip of `prep audio`): a CSV
row per scan, named by its path under SRC or its stem, then target columns, each a column field
in the smallest dtype that holds it (integers, numbers, class names as indices). A scan without
a row is a `target_missing` reject; a bad row stops the run, naming its line."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Column as ColumnField
from loaders.format.spec import smallest_uint
from prep.media.table.types import NUMBER, int_dtype
from prep.run.errors import PrepError
from prep.run.inputs import INTEGER, read_rows, reject_record
from prep.sources.volumes import stem

FIELD = "volume_target"  # arrays volume_target_0, volume_target_1, ... in column order
_NUMBER = re.compile(NUMBER)
Value = int | float


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str
    classes: list[str] | None = None


@dataclass
class Targets:
    path: Path
    columns: list[Column]
    rows: dict[str, tuple[Value, ...]]  # scan key -> one value per column
    lines: dict[str, int]  # scan key -> its line in the file


def scan_key(name: str) -> str:
    """What a row and a scan are matched by: the relative path without .nii/.nii.gz."""
    name = name.strip().removeprefix("./")
    return stem(name) or name


def read_targets(path: Path) -> Targets:
    """The targets of a CSV with a header row; PrepError naming the file and line when bad."""
    if path.suffix.lower() != ".csv" or not path.is_file():
        raise PrepError(f"--targets {path}: no such CSV file. HINT: a .csv with a header row")
    rows = read_rows(path)
    header = list(rows[0][1]) if rows else []
    if len(header) < 2:
        raise PrepError(
            f"{path}: no rows, or one column. HINT: a header row, then per scan its path "
            "or stem and one or more target columns"
        )
    for n, row in rows:
        if None in row or None in row.values():
            raise PrepError(f"{path}: line {n} does not have the header's {len(header)} fields")
    lines: dict[str, int] = {}
    for n, row in rows:
        key = scan_key(row[header[0]])
        if key in lines:
            raise PrepError(
                f"{path}: line {n} names scan {key!r} again (line {lines[key]}). "
                "HINT: one row per scan"
            )
        lines[key] = n
    cells = [[(n, row[name].strip()) for n, row in rows] for name in header[1:]]
    parsed = [_column(path, name, col) for name, col in zip(header[1:], cells, strict=True)]
    values = list(zip(*(v for _, v in parsed), strict=True))
    return Targets(path, [c for c, _ in parsed], dict(zip(lines, values, strict=True)), lines)


def _column(path: Path, name: str, cells: list[tuple[int, str]]) -> tuple[Column, list[Value]]:
    """A target column as stored: its dtype (and class names) and its values."""
    empty = next((n for n, v in cells if not v), None)
    if empty is not None:
        raise PrepError(f"{path}: line {empty} has no value in column {name!r}")
    numbers = [(n, v) for n, v in cells if _NUMBER.fullmatch(v)]
    names = [(n, v) for n, v in cells if not _NUMBER.fullmatch(v)]
    if numbers and names:
        odd, other = (numbers, names) if len(numbers) < len(names) else (names, numbers)
        (n, value), (m, example) = odd[0], other[0]
        kinds = "class names" if other is names else "numbers"
        raise PrepError(
            f"{path}: line {n} has {value!r} in column {name!r}, but {len(other)} rows have "
            f"{kinds} (line {m}: {example!r}). HINT: a target column holds numbers only or "
            "class names only; fix that row"
        )
    if names:
        classes = sorted({v for _, v in names})
        index = {c: i for i, c in enumerate(classes)}
        dtype = smallest_uint(len(classes) - 1)
        return Column(name, dtype, classes), [index[v] for _, v in names]
    if all(INTEGER.fullmatch(v) for _, v in numbers):
        ints: list[Value] = [int(v) for _, v in numbers]
        try:
            dtype = int_dtype(int(min(ints)), int(max(ints)))
        except PrepError as e:
            raise PrepError(f"{path}: column {name!r}: {e}") from None
        return Column(name, dtype), ints
    floats = np.asarray([float(v) for _, v in numbers])
    if not np.isfinite(floats).all():
        n = numbers[int(np.flatnonzero(~np.isfinite(floats))[0])][0]
        raise PrepError(f"{path}: line {n} has a number in column {name!r} over float64's range")
    exact = np.array_equal(floats.astype(np.float16).astype(np.float64), floats)
    return Column(name, "float16" if exact else "float32"), floats.tolist()


SCAN_HINT = "a scan's path under SRC or its stem (ct/a.nii.gz or ct/a)"


def check_rows(targets: Targets, keys: set[str], noun: str = "scan", hint: str = SCAN_HINT) -> None:
    """PrepError naming the first row that names none of `keys` (every input listed)."""
    stray = [key for key in targets.rows if key not in keys]
    if stray:
        raise PrepError(
            f"{targets.path}: line {targets.lines[stray[0]]} names {stray[0]!r}, no {noun} in "
            f"SRC ({len(stray)} such rows). HINT: the first column is {hint}"
        )


def attach(
    targets: Targets, items: list[Any], key: Callable[[str], str] = scan_key, code: str = "target"
) -> tuple[list[Any], list[dict[str, Any]]]:
    """`items` with their row's values, by path or `key`; a `<code>_missing` reject without."""
    kept, rejects = [], []
    for it in items:
        values = targets.rows.get(it.rel, targets.rows.get(key(it.rel)))
        if values is None:
            why = f"no row in {targets.path.name} names it (or its stem)"
            rejects.append(reject_record(it.rel, f"{code}_missing", why))
        else:
            kept.append(replace(it, target=values))
    return kept, rejects


def array_of(j: int) -> str:
    """The field (and array) of target column j: volume_target_0, volume_target_1, ..."""
    return f"{FIELD}_{j}"


def target_fields(targets: Targets) -> dict[str, ColumnField]:
    """A column field per target column, in the file's order (class id i is vocab[i])."""
    return {
        array_of(j): ColumnField(
            name=c.name,
            role="target",
            dtype=c.dtype,
            vocab=None if c.classes is None else tuple(c.classes),
            first_code=None if c.classes is None else 0,
        )
        for j, c in enumerate(targets.columns)
    }
