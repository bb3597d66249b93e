"""Numbers: `Array` (fixed shape, or one ragged leading dimension) and `Scalar`.

>>> Array("float32", (None, 4)).encode(np.zeros((2, 4), np.float32))[""].shape
(8,)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, FieldError, Piece, Reading, as_array, ragged_batch, spec
from loaders.format.spec import NUMBERS, ArraySpec


@dataclass(frozen=True)
class Array(Field):
    """Numbers of `dtype` and `shape`, a leading None ragged; `finite`: NaN is a reject; `wide`:
    read as widened() does (torch computes with int64).

    Examples:
        >>> from prep.fields import Array
        >>> fields = {"embedding": Array("float32", (512,), finite=True),
        ...           "points": Array("float32", (None, 3))}  # None: a ragged first dimension
    """

    dtype: str
    shape: tuple[int | None, ...] = ()
    finite: bool = False
    wide: bool = False
    kind = "array"

    def __post_init__(self) -> None:
        if self.dtype not in (*NUMBERS, "float64", "bool"):
            raise ValueError(f"dtype {self.dtype!r} is not one of {(*NUMBERS, 'float64', 'bool')}")
        object.__setattr__(self, "shape", tuple(self.shape))
        rest = self.shape[1:] if self.shape[:1] == (None,) else self.shape
        if not all(isinstance(n, int) and n >= 0 for n in rest):
            raise ValueError(f"shape {self.shape}: sizes, with None first for a ragged one")

    def follows(self) -> str | None:
        return "per_box" if self.is_ragged() else None  # COCO's labels, iscrowd, area

    def is_ragged(self) -> bool:
        return self.shape[:1] == (None,)

    @property
    def row(self) -> tuple[int, ...]:
        """One row's shape (a fixed field: the whole shape)."""
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
            return {name: torch.from_numpy(widened(batch.values(name), self.wide))}
        pieces = [widened(p, self.wide) for p in batch.pieces(name)]
        return ragged_batch(name, pieces, self.row, policy)

    def read_dtype(self, declared: ArraySpec) -> str:
        return widened(np.zeros(0, declared.dtype), self.wide).dtype.name

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        got = piece(name)
        return got.reshape(-1, *self.row) if self.is_ragged() else got

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        step = math.prod(self.row)
        off = arrays.get(name + ".offsets")
        if off is not None and step > 1 and np.any(np.diff(off) % step):
            return [f"a sample of {name} is not whole rows of {list(self.row)}"]
        return []


@dataclass(frozen=True)
class Scalar(Array):
    """One number a sample: `Array(dtype, ())`.

    Examples:
        >>> from prep.fields import Image, Scalar
        >>> fields = {"image": Image(), "age": Scalar("float32", finite=True)}
    """

    dtype: str = "float32"
    kind = "scalar"


def widened(values: np.ndarray, wide: bool) -> np.ndarray:
    """`values` as read: with `wide`, unsigned 16-64 bit ints as int64 (uint64: a view)."""
    if not wide or values.dtype.kind != "u" or values.dtype.itemsize == 1:
        return values
    return values.view(np.int64) if values.dtype.itemsize == 8 else values.astype(np.int64)
