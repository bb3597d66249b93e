"""Listed inputs of the samples run, sorted: Python objects, the rows of a CSV/JSONL/Parquet file,
the files of a folder or the lines of a .txt; or an importer's own listing (Source)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prep.run.errors import PrepError
from prep.run.inputs import read_rows, walk
from prep.run.kind import fingerprint
from prep.run.samples import Item

ROWS = (".csv", ".jsonl", ".parquet")


@dataclass
class Listing:
    items: list[Item]
    rejects: list[dict[str, Any]]
    base: Path | None  # relative paths in the inputs are relative to this folder
    fingerprint: str


def list_inputs(inputs: Any, limit: int | None) -> Listing:
    """The inputs in order (a folder's files sorted), the first `limit` of them."""
    rejects: list[dict[str, Any]] = []
    if isinstance(inputs, (str, Path)):
        src = Path(inputs).absolute()
        if src.is_dir():
            found, rejects = walk(src, lambda name: True)
            items = [Item(rel, str(path)) for rel, path in found]
            stats = [_stat(rel, path) for rel, path in found]
            return _listing(items[:limit], rejects, src, stats)
        suffix = src.suffix.lower()
        if not src.is_file():
            raise PrepError(f"{src} is not a file or folder. HINT: check the path")
        if suffix in (".csv", ".jsonl"):
            items = [Item(f"{src.name}:{n}", row) for n, row in read_rows(src)]
        elif suffix == ".parquet":  # the first `limit` rows, a batch at a time
            import pyarrow.parquet as pq

            rows: list[dict[str, Any]] = []
            try:
                with pq.ParquetFile(src) as f:
                    for b in f.iter_batches(batch_size=min(1024, limit or 1024) or 1):
                        rows += b.to_pylist()
                        if limit is not None and len(rows) >= limit:
                            break
            except Exception as e:  # pyarrow's ArrowInvalid and OSError alike
                raise PrepError(f"{src}: cannot read it as Parquet ({e})") from e
            items = [Item(f"{src.name}:{i}", r) for i, r in enumerate(rows[:limit])]
        elif suffix == ".txt":
            try:
                lines = src.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as e:
                raise PrepError(f"{src}: cannot read the list of paths ({e})") from e
            said = [(n, line.strip()) for n, line in enumerate(lines, 1)]
            items = [Item(f"{src.name}:{n}", line) for n, line in said if line]
        else:
            raise PrepError(
                f"{src}: inputs are a folder or a {', '.join(ROWS)} or .txt file, not "
                f"{suffix or 'this'}"
            )
        return _listing(items[:limit], rejects, src.parent, [_stat(src.name, src)])
    if isinstance(inputs, Sequence) and not isinstance(inputs, (bytes, bytearray)):
        items = [Item(f"#{i}", v) for i, v in enumerate(inputs)]
        return _listing(items[:limit], rejects, None, [])
    raise PrepError(
        f"inputs of type {type(inputs).__name__}: pass a list, a folder, or a .csv/.jsonl/"
        ".parquet/.txt file"
    )


def _stat(name: str, path: Path) -> tuple[str, int, int]:
    """Name, size and time of a file: a changed source is not resumed as the same."""
    st = path.stat()
    return name, st.st_size, st.st_mtime_ns


def _listing(
    items: list[Item], rejects: list[dict[str, Any]], base: Path | None, stats: list[Any]
) -> Listing:
    """The fingerprint: the files read (names, sizes, times), or the objects themselves."""
    said = stats if stats else [repr(it.value) for it in items]
    return Listing(items, rejects, base, fingerprint([said, len(items)]))


@dataclass
class Source:
    """An importer's source: `items` in order, each split's together; `splits` counts them."""

    items: list[Item]
    splits: dict[str | None, int]
    rejects: list[dict[str, Any]] = field(default_factory=list)
    stats: list[Any] = field(default_factory=list)  # what the output depends on in the files
    extra: dict[str, Any] = field(default_factory=dict)  # the manifest's, besides the fields


def file_stats(paths: list[Path]) -> list[tuple[str, int, int]]:
    return [_stat(str(p), p) for p in paths]
