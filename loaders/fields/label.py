"""Class labels: an id per sample, or a name of the field's classes mapped to its index.

>>> Label(("cat", "dog")).encode("dog")[""]
array(1, dtype=uint8)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, FieldError, Reading, spec
from loaders.format.spec import UNSIGNED, ArraySpec, smallest_uint


@dataclass(frozen=True)
class Label(Field):
    """A class id: an int 0..len(classes) - 1, or a name in `classes` (its index). Without
    `classes`, any int 0..2**32 - 1, stored as `dtype` (default uint32). Stored in the smallest
    unsigned dtype that holds the classes; read as int64."""

    classes: tuple[str, ...] | None = None
    dtype: str | None = None
    kind = "label"

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in UNSIGNED:
            raise ValueError(f"dtype {self.dtype!r} is not one of {UNSIGNED}")
        if self.classes is not None:
            if not all(isinstance(c, str) for c in self.classes):
                raise ValueError(f"classes {str(self.classes)[:40]} are not names")
            object.__setattr__(self, "classes", tuple(self.classes))
            if len(set(self.classes)) != len(self.classes) or not self.classes:
                raise ValueError(f"classes {self.classes[:5]} are empty or repeat a name")

    def stored(self) -> str:
        if self.classes is not None:
            return smallest_uint(max(0, len(self.classes) - 1))
        return self.dtype or "uint32"

    def arrays(self, name: str) -> list[ArraySpec]:
        return [spec(name, "label", self.stored(), ())]

    def dtypes(self, declared: ArraySpec) -> tuple[str, ...]:
        return UNSIGNED  # a wider one than needed reads the same ids

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
        return {"": np.asarray(value, dtype=self.stored())}

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        import torch

        return {name: torch.from_numpy(batch.values(name).astype(np.int64))}

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        values = arrays[name]
        if self.classes is not None and len(values) and int(values.max()) >= len(self.classes):
            return [f"label {int(values.max())} of {name} is not one of its classes"]
        return []

    def lines(self, name: str, m: Any) -> list[str]:
        if not self.classes:
            return []
        shown = ", ".join(self.classes[:10]) + (" ..." if len(self.classes) > 10 else "")
        return [f"classes of {name} ({len(self.classes)}): {shown}"]
