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

from loaders.fields.base import Field, FieldError, Reading, as_array, spec
from loaders.fields.batching import ragged_batch
from loaders.fields.label import check_classes, class_lines
from loaders.format.spec import NUMBERS, ArraySpec


@dataclass(frozen=True)
class Array(Field):
    """Numbers of `dtype` and `shape`; a leading None makes that dimension ragged (0 allowed).
    `finite`: NaN and infinities are a reject. `wide`: unsigned 16-64 bit values are read as
    int64 (uint64 as the same 64 bits, signed), which torch computes with (an image's source
    size, its perceptual hash). `classes`: the values are ids 0..len(classes) - 1 of these
    class names (a COCO sample's labels, one a box)."""

    dtype: str
    shape: tuple[int | None, ...] = ()
    finite: bool = False
    wide: bool = False
    classes: tuple[str, ...] | None = None
    kind = "array"

    def __post_init__(self) -> None:
        if self.dtype not in (*NUMBERS, "float64", "bool"):
            raise ValueError(f"dtype {self.dtype!r} is not one of {(*NUMBERS, 'float64', 'bool')}")
        object.__setattr__(self, "shape", tuple(self.shape))
        rest = self.shape[1:] if self.shape[:1] == (None,) else self.shape
        if not all(isinstance(n, int) and n >= 0 for n in rest):
            raise ValueError(f"shape {self.shape}: sizes, with None first for a ragged one")
        if self.classes is not None:
            # names only (ids are never looked up by name: COCO may name two categories alike)
            object.__setattr__(self, "classes", check_classes(self.classes, unique=False))
            if np.dtype(self.dtype).kind not in "iu":
                raise ValueError(f"class ids of dtype {self.dtype}: integers only")

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
        if (
            self.classes is not None
            and arr.size
            and not 0 <= arr.min() <= arr.max() < len(self.classes)
        ):
            raise FieldError("bad_label", f"a class id is not 0..{len(self.classes) - 1}")
        return {"": arr.reshape(-1) if self.is_ragged() else arr}

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        import torch

        if not self.is_ragged():
            return {name: torch.from_numpy(widened(batch.values(name), self.wide))}
        pieces = [widened(p, self.wide) for p in batch.pieces(name)]
        return ragged_batch(name, pieces, self.row, policy)

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        step = math.prod(self.row)
        off = arrays.get(name + ".offsets")
        if off is not None and step > 1 and np.any(np.diff(off) % step):
            return [f"a sample of {name} is not whole rows of {list(self.row)}"]
        if self.classes is not None and arrays[name].size:
            ids = arrays[name]
            if ids.min() < 0 or ids.max() >= len(self.classes):
                return [f"a class id of {name} is not one of its {len(self.classes)} classes"]
        return []

    def lines(self, name: str, m: Any) -> list[str]:
        return class_lines(name, self.classes)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self.classes is None:
            del d["classes"]  # numbers: as every array field without class names is declared
        return d


@dataclass(frozen=True)
class Scalar(Array):
    """One number a sample: `Array(dtype, ())`."""

    dtype: str = "float32"
    kind = "scalar"


def widened(values: np.ndarray, wide: bool) -> np.ndarray:
    """`values` as read: with `wide`, unsigned 16-64 bit ints as int64 (uint64: a view)."""
    if not wide or values.dtype.kind != "u" or values.dtype.itemsize == 1:
        return values
    return values.view(np.int64) if values.dtype.itemsize == 8 else values.astype(np.int64)
