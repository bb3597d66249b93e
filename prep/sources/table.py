"""Table inputs: which files, and their blocks of rows of bounded memory (text cut at line ends
outside quotes every BLOCK_BYTES or so, Parquet at its row groups), whatever --jobs, which the
scan (prep.kinds.table.scan) parses once each; CSV cells typed by pyarrow per block."""

from __future__ import annotations

import csv
import glob
import io
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pj

from prep.run.errors import PrepError
from prep.run.inputs import check_file, reject_record, walk

try:  # the common block in one C pass (prep/_csv.c); without it, or for others, pyarrow's
    from prep._csv import parse as fast_parse
    from prep._csv import quotes as count_quotes
except ImportError:  # no C compiler at install
    fast_parse = count_quotes = None

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".parquet": "parquet"}
# Compressed text tables are decompressed into the run folder first (prep.kinds.table.scan):
# a block is a byte range, and a compressed stream cannot be entered at one.
COMPRESSED = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}
BLOCK_BYTES = 16 << 20  # a block's bytes: its parse holds a few times this in memory
HINT_ENCODING = "HINT: convert the file to UTF-8 (iconv -f latin1 -t utf-8)"


@dataclass(frozen=True)
class Block:
    """Rows of one file: bytes [start, end) or row group `start` (Parquet); `first_row`: its
    1-based row number; `index`: its place among the run's blocks."""

    path: str
    rel: str
    fmt: str
    start: int
    end: int
    first_row: int = 1
    rows: int = 0
    index: int = 0


def table_format(path: Path) -> tuple[str, str | None]:
    """The file's format and compression from its name ("" when prep reads no such file).

    >>> table_format(Path("a.csv.gz")), table_format(Path("b.parquet")), table_format(Path("c"))
    (('csv', 'gzip'), ('parquet', None), ('', None))
    """
    name = path.name.lower()
    codec = next((c for s, c in COMPRESSED.items() if name.endswith(s)), None)
    if codec is not None:
        name = name.rsplit(".", 1)[0]
    fmt = FORMATS.get(Path(name).suffix, "")
    return ("", None) if fmt == "parquet" and codec else (fmt, codec)


def _is_table(name: str) -> bool:
    return bool(table_format(Path(name))[0])


def _listed(src: str, many: bool) -> tuple[list[tuple[str, Path]], list[dict[str, Any]]]:
    """One SRC's table files as (rel, path), and rejects; `many`: a file named as given."""
    root = Path(src)
    if root.is_dir():
        return walk(root, _is_table)
    if glob.has_magic(src) and not root.exists():
        found, rejects = [], []
        for p in sorted(Path(p) for p in glob.glob(src, recursive=True)):
            if _is_table(p.name):
                problem = check_file(p, str(p))
                (rejects.append(problem) if problem else found.append((str(p), p)))
        return found, rejects
    if _is_table(root.name):
        rel = src if many else root.name
        problem = check_file(root, rel)
        return ([], [problem]) if problem else ([(rel, root)], [])
    raise PrepError(
        f"{src} is not a folder, a glob or a .csv/.tsv/.jsonl(.gz)/.parquet file. HINT: name "
        "table files, folders of them, or a quoted glob 'data/*.csv'"
    )


def sources_of(src: str | list[str] | None) -> list[str]:
    """SRC as a list: one path or glob, or several (a shell's expansion of data/*.csv)."""
    return [src] if isinstance(src, str) else list(src or [])


def list_tables(src: str | list[str]) -> tuple[list[tuple[str, Path]], list[dict[str, Any]]]:
    """The table files of `src` as (rel, path) in SRC order, once each, and rejects."""
    paths = sources_of(src)
    got = [_listed(one, len(paths) > 1) for one in paths]
    rejects = [r for _, refused in got for r in refused]
    unique: dict[Path, tuple[str, Path]] = {}  # a file named twice is read once
    for rel, path in (f for listed, _ in got for f in listed):
        unique.setdefault(path.resolve(), (rel, path))
    empty = [(rel, path) for rel, path in unique.values() if path.stat().st_size == 0]
    rejects += [reject_record(rel, "empty", "the file is empty (0 bytes)") for rel, _ in empty]
    return [f for f in unique.values() if f not in empty], rejects


def decompressed(rel: str, path: Path, folder: Path, index: int) -> Path:
    """A compressed table decompressed into `folder` in bounded memory; a plain one as is."""
    fmt, codec = table_format(path)
    if codec is None:
        return path
    plain = folder / f"{index:05d}.{fmt}"
    try:
        with pa.input_stream(str(path), compression=codec) as f, open(plain, "wb") as out:
            while chunk := f.read(BLOCK_BYTES):
                out.write(chunk)
    except (pa.ArrowException, OSError) as e:
        raise PrepError(f"{rel}: cannot decompress it ({e}). HINT: check the file") from e
    return plain


def _quotes(view: memoryview) -> int:
    return count_quotes(view) if count_quotes is not None else bytes(view).count(b'"')


def _cuts(path: Path, size: int, quoted: bool) -> Iterator[tuple[int, int]]:
    """Byte ranges of about `size` ending at line ends outside quotes (an even count of `"`),
    found in a memory map: no byte is copied, and only the quotes are counted."""
    total = path.stat().st_size
    if not total:
        return
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view, start = memoryview(mm), 0
        try:
            while start < total:
                end = min(start + size, total)
                if end < total:
                    cut = mm.rfind(b"\n", start, end) + 1
                    while quoted and cut > start and _quotes(view[start:cut]) % 2:
                        cut = mm.rfind(b"\n", start, cut - 1) + 1
                    if cut <= start:  # one row longer than a block: read on to its end
                        yield start, total
                        return
                    end = cut
                yield start, end
                start = end
        finally:
            view.release()


def blocks(rel: str, path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[Block]:
    """The file's blocks in order, without their row counts (the scan fills them in)."""
    fmt = table_format(path)[0]
    if fmt == "parquet":
        try:
            import pyarrow.parquet as pq  # here: 10 ms of every run's start, for Parquet alone

            groups = pq.ParquetFile(path).num_row_groups
        except (pa.ArrowException, OSError) as e:
            raise PrepError(f"{rel}: not a readable Parquet file ({e}). HINT: rewrite it") from e
        yield from (Block(str(path), rel, fmt, g, g + 1) for g in range(groups))
        return
    header = 0  # where the header line ends (a header alone: the file has no rows)
    if fmt in ("csv", "tsv"):
        with open(path, "rb") as f:
            header = len(f.readline(1 << 20).rstrip(b"\n")) + 1
    for a, b in _cuts(path, block_bytes, fmt != "jsonl"):
        if b > max(a, header):
            yield Block(str(path), rel, fmt, max(a, header), b)


def read_block(
    block: Block,
    na_values: list[str],
    rejects: list[dict[str, Any]],
    types: dict[str, pa.DataType] | None = None,
    delimiter: str | None = None,
) -> pa.Table:
    """The block's rows (CSV typed by `types`); rows of a wrong field count go to `rejects`."""
    path = Path(block.path)
    if block.fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).read_row_group(block.start)
    # A memory map: the C path reads the rows where they are (pyarrow's, a copy).
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        head = f.readline(1 << 20) if block.fmt != "jsonl" else b""
        with memoryview(mm)[block.start : block.end] as data:
            return _parsed(head, data, block, (na_values, delimiter), rejects, types or {})


def _parsed(
    head: bytes,
    data: memoryview,
    block: Block,
    how: tuple[list[str], str | None],
    rejects: list[dict[str, Any]],
    types: dict[str, pa.DataType],
) -> pa.Table:
    """`how`: the --na-values and --delimiter."""
    na_values, delimiter = how
    try:
        if block.fmt == "jsonl":
            return pj.read_json(io.BytesIO(data))
        sep = delimiter or ("\t" if block.fmt == "tsv" else ",")
        return _read_csv(head, data, block, (na_values, sep), rejects, types)
    except pa.ArrowInvalid as e:
        raise PrepError(
            f"{block.rel}: cannot parse the rows from row {block.first_row} on ({e}). "
            "HINT: check the file's format and quoting"
        ) from e


def _read_csv(
    head: bytes,
    view: memoryview,
    block: Block,
    how: tuple[list[str], str],
    rejects: list[dict[str, Any]],
    types: dict[str, pa.DataType],
) -> pa.Table:
    """`how`: the --na-values and the delimiter."""
    na_values, sep = how
    try:
        line = head.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise PrepError(f"{block.rel}: row 0 (the header) is not UTF-8. {HINT_ENCODING}") from e
    names = next(csv.reader([line], delimiter=sep), [])
    fast = _fast_csv(view, names, sep, na_values, types)
    if fast is not None:
        return fast
    data = bytes(view)

    def bad_row(row: Any) -> str:
        found = reject_record(
            block.rel,
            "fields",
            f"the row has {row.actual_columns} fields, the header {row.expected_columns}: "
            f"{row.text[:80]!r}",
        )
        fields = [row.actual_columns, row.expected_columns]  # the scan's check, not stored
        rejects.append(found | {"row": row.number, "fields": fields})
        return "skip"

    parse = pcsv.ParseOptions(
        delimiter=sep,
        newlines_in_values=b'"' in data,  # only quoted cells hold newlines (parses 1.5x faster)
        invalid_row_handler=bad_row,
    )
    convert = pcsv.ConvertOptions(
        column_types={n: t for n, t in types.items() if n in names},
        null_values=["", *na_values],
        true_values=["true", "True", "TRUE"],  # not pyarrow's 1/0: those stay integers
        false_values=["false", "False", "FALSE"],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
        # Text as dictionaries: made while converting, about free, and each distinct value is
        # then typed, checked and looked up once (the cardinality limit is per 1 MB chunk).
        auto_dict_encode=True,
        auto_dict_max_cardinality=2**31 - 1,
    )
    read = pcsv.ReadOptions(column_names=names, use_threads=False)
    return pcsv.read_csv(io.BytesIO(data), read, parse, convert)


CODED = pa.dictionary(pa.int32(), pa.binary())  # a --categorical column as the scan reads it


def _fast_csv(
    data: bytes | memoryview,
    names: list[str],
    sep: str,
    na_values: list[str],
    types: dict[str, pa.DataType],
) -> pa.Table | None:
    """The block as pyarrow would read it, from prep._csv, or None where it leaves it to
    pyarrow (quotes inside cells, rows of other field counts, cells of other types...)."""
    coded = tuple(n in types for n in names)
    if fast_parse is None or len(sep.encode()) != 1 or any(types[n] != CODED for n in types):
        return None
    got = fast_parse(data, len(names), sep.encode(), tuple(v.encode() for v in na_values), coded)
    if got is None:
        return None
    rows, cols = got
    return pa.table([_arrow(rows, c, b) for c, b in zip(cols, coded, strict=True)], names=names)


def _arrow(rows: int, column: tuple[Any, ...], coded: bool) -> pa.Array:
    """One column of prep._csv.parse's as an Arrow array (its buffers, not copied)."""
    kind, *buffers = column
    if kind == "null":
        return pa.nulls(rows)
    valid = None if buffers[0] is None else pa.py_buffer(buffers[0])
    if kind != "text":
        dtype = pa.int64() if kind == "int" else pa.float64()
        return pa.Array.from_buffers(dtype, rows, [valid, pa.py_buffer(buffers[1])])
    indices = pa.Array.from_buffers(pa.int32(), rows, [valid, pa.py_buffer(buffers[1])])
    offsets, values = (pa.py_buffer(b) for b in buffers[2:])
    dtype = pa.binary() if coded else pa.string()
    words = pa.Array.from_buffers(dtype, len(buffers[2]) // 4 - 1, [None, offsets, values])
    return pa.DictionaryArray.from_arrays(indices, words, safe=False)
