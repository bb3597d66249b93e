"""Class labels: `Label`, an id (or class name) per sample, `Labels`, one per object of a sample.

>>> Label(("cat", "dog")).encode("dog")[""]
array(1, dtype=uint8)
>>> Labels(classes=("cat", "dog")).caption(np.array([1, 0, 1]))
'dog, cat, dog'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.array import Array
from loaders.fields.base import Field, FieldError, Piece, Reading, spec, tensor
from loaders.format.spec import UNSIGNED, ArraySpec, smallest_uint


@dataclass(frozen=True)
class Label(Field):
    """A class id or a name of `classes`, in the smallest unsigned dtype (none: `dtype`).

    Examples:
        >>> from prep.fields import Image, Label
        >>> fields = {"image": Image(), "label": Label(classes=("cat", "dog"))}  # "dog" or 1
    """

    classes: tuple[str, ...] | None = None
    dtype: str | None = None
    kind = "label"

    def follows(self) -> str | None:
        return "label"

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in UNSIGNED:
            raise ValueError(f"dtype {self.dtype!r} is not one of {UNSIGNED}")
        if self.classes is not None:
            names = isinstance(self.classes, tuple | list)
            if not names or not all(isinstance(c, str) for c in self.classes):
                raise ValueError(f"classes {str(self.classes)[:40]} is not a list of names")
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
        return {name: tensor(batch.values(name).astype(np.int64))}

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        values, n = arrays[name], len(self.classes or ())
        if self.classes is not None and len(values) and int(values.max()) >= n:
            return [f"label {int(values.max())} of {name} is not one of its classes"]
        return []

    def read_dtype(self, declared: ArraySpec) -> str:
        return "int64"

    def value(self, name: str, piece: Piece, size: int | None) -> int:
        return int(piece(name))

    def caption(self, value: Any) -> str:
        return named(self.classes, int(value))

    def lines(self, name: str, m: Any) -> list[str]:
        """Its classes, then each split's samples and the classes it lacks (`extra.splits`)."""
        if not self.classes:
            return []
        shown = ", ".join(self.classes[:10]) + (" ..." if len(self.classes) > 10 else "")
        lines = [f"classes of {name} ({len(self.classes)}): {shown}"]
        said = m.extra.get("splits")
        said = said if isinstance(said, dict) else {}
        counts = m.counts()
        for split in m.splits:
            n = int(counts[m.split_of() == split].sum())
            one = said.get(split)
            per = one.get("per_class") if isinstance(one, dict) else None
            line = f"split {split}: {n:,} samples"
            if isinstance(per, list) and len(per) == len(self.classes):
                lacking = [c for c, k in zip(self.classes, per, strict=True) if not k]
                line += f", {len(per) - len(lacking)} of {len(per)} classes"
                if lacking:
                    more = " ..." if len(lacking) > 5 else ""
                    line += f" (none of: {', '.join(lacking[:5])}{more})"
            lines.append(line)
        return lines


@dataclass(frozen=True)
class Labels(Array):
    """The class ids (or names) of a sample's objects: an `Array("int64", (None,))` per box.

    Examples:
        >>> from prep.fields import Boxes, Image, Labels
        >>> fields = {"image": Image(), "boxes": Boxes("image"),
        ...           "labels": Labels(classes=("cat", "dog"))}
    """

    dtype: str = "int64"
    shape: tuple[int | None, ...] = (None,)
    classes: tuple[str, ...] = ()
    kind = "labels"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "classes", tuple(self.classes))
        if self.shape != (None,) or self.dtype != "int64":
            raise ValueError(f"labels are int64 (None,), not {self.dtype} {self.shape}")
        if not all(isinstance(c, str) for c in self.classes):
            raise ValueError(f"classes {str(self.classes)[:40]} are not names")

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        if isinstance(value, (list, tuple)) and any(isinstance(v, str) for v in value):
            unknown = [v for v in value if v not in self.classes]
            if unknown:
                said = f"class {str(unknown[0])[:40]!r} is not one of the classes"
                raise FieldError("bad_label", said)
            value = [self.classes.index(v) for v in value]
        out = super().encode(value)
        ids = out[""]
        if self.classes and len(ids) and (ids.min() < 0 or ids.max() >= len(self.classes)):
            raise FieldError("bad_label", f"a class id is not 0..{len(self.classes) - 1}")
        return out

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        ids = arrays[name]
        n = len(self.classes)
        if n and len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= n):
            return [f"a class id of {name} is not one of its {n} classes"]
        return []

    def caption(self, value: Any) -> str:
        return ", ".join(named(self.classes, int(i)) for i in np.asarray(value).tolist())


def named(classes: Sequence[str] | None, label: int) -> str:
    """Class `label`'s name, or "label N" where there is none."""
    return classes[label] if classes and 0 <= label < len(classes) else f"label {label}"
