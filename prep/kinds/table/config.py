"""`prep table` options (prep.run.config has the options every command shares)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prep.run.config import RunConfig, check, listed, opt

DELIMITERS = {"tab": "\t", "\\t": "\t", "space": " "}


@dataclass
class TableConfig(RunConfig):
    src: str | list[str] | None = opt(  # type: ignore[assignment]  # several SRC: tables only
        None,
        "One or more .csv/.tsv/.jsonl/.parquet files (.csv.gz, .bz2, .zst too), folders of "
        "them, or quoted globs 'data/*.csv'.",
    )
    delimiter: str | None = opt(
        None, "The CSV field separator, one character or tab | space (default , and tab for .tsv)."
    )
    limit: int | None = opt(None, "Only the first N rows.")
    target: str | None = opt(None, "The column to predict (y); none: batches are (x_num, x_cat).")
    categorical: str | None = opt(None, "Columns to code as categories, comma-separated.")
    drop: str | None = opt(None, "Columns to leave out, comma-separated.")
    key: str | None = opt(None, "Split by a hash of this column (default: of the whole row).")
    val_fraction: float = opt(0.0, "Share of rows in val, chosen by a hash of --key or the row.")
    na_values: str | None = opt(None, "Cell texts meaning missing besides '', e.g. N/A,-.")
    float16: bool = opt(False, "Store floats as float16 where every value fits (|x| <= 65504).")
    missing_mask: bool = opt(False, "Also store a 0/1 mask per numeric column with missing values.")
    shard_rows: int = opt(524288, "Rows per shard (one task each).")

    SECTION: ClassVar[str] = "table"

    def names(self, key: str) -> list[str]:
        """A comma-separated option as a list of column names."""
        value = getattr(self, key)
        return listed(value, f"--{key.replace('_', '-')}", str) if value else []

    def validate(self) -> None:
        super().validate()
        if isinstance(self.src, list) and len(self.src) == 1:
            self.src = self.src[0]  # one SRC is saved as a string, as before
        if self.delimiter is not None:
            self.delimiter = DELIMITERS.get(self.delimiter.lower(), self.delimiter)
            check(
                len(self.delimiter) == 1 and self.delimiter not in '"\r\n',
                f"--delimiter {self.delimiter!r}",
                "one character (not a quote or a line end), tab or space",
            )
        check(0 <= self.val_fraction < 1, f"--val-fraction {self.val_fraction}", "in [0, 1)")
        check(self.shard_rows >= 1, f"--shard-rows {self.shard_rows}", "at least 1")
        dropped = set(self.names("drop"))
        for key in ("target", "key"):
            value = getattr(self, key)
            check(value not in dropped, f"--{key} {value}", "a column that is not dropped")
        used = self.key is None or self.val_fraction > 0
        check(used, f"--key {self.key}", "used with --val-fraction above 0")
