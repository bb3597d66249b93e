"""A table's column (`prep table`), or a per-volume target (`prep volumes --targets`): one value a
sample in a narrow stored dtype. Its roles, codes and summary: docs/format.md, "Tables".

>>> Column(name="price", role="num", dtype="float32").arrays("num_0")[0].dtype
'float32'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, Piece, Reading, spec, tensor
from loaders.format.spec import NUMBERS, ArraySpec

ROLES = ("num", "cat", "target")
FIRST_CODE = 2  # a categorical column's first value's code: 0 is missing, 1 unseen in train
NAT = np.iinfo(np.int64).min  # a missing time (numpy's NaT)
HEADING = f"{'column':<20}{'array':<10}{'role':<8}{'type':<8}{'dtype':<9}{'missing':>9}  vocab"


@dataclass(frozen=True)
class Column(Field):
    name: str = ""
    role: str = "num"
    dtype: str = "float32"
    type: str | None = None
    missing: int = 0
    lo: float | None = None
    hi: float | None = None
    mean: float | None = None
    std: float | None = None
    vocab: tuple[str, ...] | None = None
    counts: tuple[int, ...] | None = None
    first_code: int | None = None
    mask: bool = False
    kind = "column"
    heading = HEADING

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.role not in ROLES:
            raise ValueError(f"name {self.name!r:.40} / role {self.role!r}: a name / {ROLES}")
        if not isinstance(self.type, str | None):  # prep info prints it in a column
            raise ValueError(f"type {self.type!r:.40} is not a name")
        if self.dtype not in NUMBERS:
            raise ValueError(f"dtype {self.dtype!r} is not one of {NUMBERS}")
        for key in ("lo", "hi", "mean", "std"):
            v = getattr(self, key)
            if not (v is None or (isinstance(v, int | float) and not isinstance(v, bool))):
                raise ValueError(f"{key} {v!r:.40} is no number")
        # Each a tuple (a manifest's list; a str is no list), its items' types compared as a set.
        for key, ok, what in (("vocab", {str}, "values"), ("counts", {int}, "counts")):
            v = getattr(self, key)
            if v is not None and not (
                isinstance(v, tuple)
                and set(map(type, v)) <= ok
                and (key == "vocab" or min(v, default=0) >= 0)
            ):
                raise ValueError(f"{key} {str(v)[:40]} is not a list of {what}")
        if not isinstance(self.missing, int) or (self.first_code or 0) < 0:
            raise ValueError(f"missing {self.missing!r:.20} / first_code {self.first_code!r:.20}")

    @property
    def first(self) -> int:
        """The code of the vocabulary's first value."""
        return FIRST_CODE if self.first_code is None else self.first_code

    def arrays(self, name: str) -> list[ArraySpec]:
        missing = [spec(f"{name}_missing", "missing", "uint8", ())] if self.mask else []
        return [spec(name, "column", self.dtype, ()), *missing]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        values = batch.values(name)
        wide = np.float32 if self.role == "num" or values.dtype.kind == "f" else np.int64
        return {name: tensor(values.astype(wide))}

    def limits(self, name: str) -> dict[str, tuple[int, str]]:
        if self.vocab is None:
            return {}
        top = len(self.vocab) - 1 + self.first
        return {name: (top, f"code {{v}} is beyond column {self.name}'s codes 0..{top}")}

    def read_dtype(self, declared: ArraySpec) -> str:
        return "float32" if self.role == "num" or declared.dtype.startswith("float") else "int64"

    def lines(self, name: str, m: Any) -> list[str]:
        """A row of the columns' table (under HEADING); a target of class ids, its classes."""
        vocab = "-" if self.vocab is None else f"{len(self.vocab):,}"
        row = (
            f"{self.name[:19]:<20}{name:<10}{self.role:<8}{self.type or '-':<8}{self.dtype:<9}"
            f"{self.missing:>9,}  {vocab}"
        )
        if self.role != "target" or self.vocab is None or self.first != 0:
            return [row]
        shown = ", ".join(self.vocab[:10]) + (" ..." if len(self.vocab) > 10 else "")
        return [row, f"classes ({len(self.vocab)}), ids 0..{len(self.vocab) - 1}: {shown}"]

    def value(self, name: str, piece: Piece, size: int | None) -> Any:
        """The stored cell; None where the column's mask says missing."""
        missing = self.mask and bool(piece(f"{name}_missing"))
        return None if missing else piece(name)[()]

    def caption(self, value: Any) -> str:
        """The cell as the table had it: a code as its value, a time in ISO, missing empty."""
        if value is None:
            return ""
        if self.vocab is not None:
            code = int(value)
            if 0 <= code - self.first < len(self.vocab):
                return str(self.vocab[code - self.first])
            return "" if code == 0 and self.first else "<unseen>"
        if self.type == "time":
            return "" if int(value) == NAT else str(np.datetime64(int(value), "ns"))[:19]
        if isinstance(value, np.floating):
            return "" if np.isnan(value) else f"{value:g}"
        return str(value)
