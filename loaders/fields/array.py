"""Numeric sample fields: `Array` (fixed shape, or one ragged leading dimension), `Scalar`,
`Label` (class ids, names mapped to ids) and `Tokens` (token ids of a text, ragged).

>>> Array("float32", (None, 4)).encode(np.zeros((2, 4), np.float32))[""].shape
(8,)
>>> Label(("cat", "dog")).encode("dog")[""]
array(1, dtype=uint8)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import FieldError, Reading, SampleField, as_array, spec
from loaders.fields.batching import ragged_batch
from loaders.format.kinds import NUMBERS, smallest_uint
from loaders.format.spec import ArraySpec


@dataclass(frozen=True)
class Array(SampleField):
    """Numbers of `dtype` and `shape`; a leading None makes that dimension ragged (0 allowed).
    `finite`: NaN and infinities are a reject."""

    dtype: str
    shape: tuple[int | None, ...] = ()
    finite: bool = False
    kind = "array"

    def __post_init__(self) -> None:
        if self.dtype not in (*NUMBERS, "float64", "bool"):
            raise ValueError(f"dtype {self.dtype!r} is not one of {(*NUMBERS, 'float64', 'bool')}")
        object.__setattr__(self, "shape", tuple(self.shape))
        rest = self.shape[1:] if self.shape[:1] == (None,) else self.shape
        if not all(isinstance(n, int) and n >= 0 for n in rest):
            raise ValueError(f"shape {self.shape}: sizes, with None first for a ragged one")

    def is_ragged(self) -> bool:
        return self.shape[:1] == (None,)

    @property
    def row(self) -> tuple[int, ...]:
        """The shape of one row of a ragged field; the whole shape of a fixed one."""
        return tuple(n for n in self.shape if n is not None)

    def arrays(self, name: str) -> list[ArraySpec]:
        return [spec(name, "array", self.dtype, self.row, "ragged" if self.is_ragged() else "raw")]

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        arr = as_array(value, np.dtype(self.dtype))
        if arr.ndim != len(self.shape) or arr.shape[self.is_ragged() :] != self.row:
            raise FieldError(
                "field_shape", f"shape {list(arr.shape)} is not {list(self.shape)} (None: any)"
            )
        if self.finite and arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise FieldError("field_nan", "holds NaN or infinity; the field says finite")
        return {"": arr.reshape(-1) if self.is_ragged() else arr}

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        import torch

        if not self.is_ragged():
            return {name: torch.from_numpy(batch.values(name))}
        return ragged_batch(name, batch.pieces(name), self.row, policy)

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        step = math.prod(self.row)
        off = arrays.get(name + ".offsets")
        if off is not None and step > 1 and np.any(np.diff(off) % step):
            return [f"a sample of {name} is not whole rows of {list(self.row)}"]
        return []


@dataclass(frozen=True)
class Scalar(Array):
    """One number a sample: `Array(dtype, ())`."""

    dtype: str = "float32"
    kind = "scalar"


@dataclass(frozen=True)
class Label(SampleField):
    """A class id: an int 0..len(classes) - 1, or a name in `classes` (its index). Without
    `classes`, any int 0..2**32 - 1. Stored in the smallest unsigned dtype; read as int64."""

    classes: tuple[str, ...] | None = None
    kind = "label"

    def __post_init__(self) -> None:
        if self.classes is not None:
            object.__setattr__(self, "classes", tuple(self.classes))
            if len(set(self.classes)) != len(self.classes) or not self.classes:
                raise ValueError(f"classes {self.classes[:5]} are empty or repeat a name")

    @property
    def dtype(self) -> str:
        return "uint32" if self.classes is None else smallest_uint(max(0, len(self.classes) - 1))

    def arrays(self, name: str) -> list[ArraySpec]:
        return [spec(name, "label", self.dtype, ())]

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        n = 2**32 if self.classes is None else len(self.classes)
        if isinstance(value, str):
            if self.classes is None or value not in self.classes:
                raise FieldError("bad_label", f"class {value[:40]!r} is not one of the classes")
            value = self.classes.index(value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise FieldError("bad_label", f"a {type(value).__name__}, not a class id or name")
        if not 0 <= int(value) < n:
            raise FieldError("bad_label", f"class id {value} is not 0..{n - 1}")
        return {"": np.asarray(value, dtype=self.dtype)}

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        import torch

        return {name: torch.from_numpy(batch.values(name).astype(np.int64))}

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        values = arrays[name]
        if self.classes is not None and len(values) and int(values.max()) >= len(self.classes):
            return [f"label {int(values.max())} of {name} is not one of its classes"]
        return []


@dataclass(frozen=True)
class Tokens(SampleField):
    """Token ids below `vocab_size` (ragged: a text's ids), stored in the smallest unsigned
    dtype, read as int64 like any ragged field. `tokenizer`: the tokenizer.json that made them,
    kept in the dataset folder under this name (prep.fields.Tokens tokenizes str values). The
    ids are checked against vocab_size by `prep verify` (loaders.format.values), not at open."""

    vocab_size: int = 0
    tokenizer: str | None = None
    kind = "tokens"

    def is_ragged(self) -> bool:
        return True

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
