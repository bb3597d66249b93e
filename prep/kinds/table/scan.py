"""The scan: every block of every table file parsed once, before any shard: the columns' types,
vocabularies and statistics, each block's rows; each parsed block kept for the shard tasks
(`.prep-run/blocks/NNNNN.arrow`, Arrow IPC: text as dictionaries, then the val mask)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from prep.kinds.table.config import TableConfig
from prep.media.table.arrow import arrow_bools, numpy_of, whole
from prep.media.table.types import Column, Stats, as_text, decide, kept_form
from prep.run.errors import PrepError
from prep.run.inputs import reject_record, warn
from prep.run.parallel import run_tasks
from prep.sources.hashsplit import val_mask
from prep.sources.table import Block, blocks, decompressed, read_block, sources_of

BLOCKS = "blocks"  # in the run folder: the parsed blocks


@dataclass
class Scan:
    blocks: list[Block]
    columns: list[Column]  # header order, dropped ones left out
    rejects: dict[int, list[dict[str, Any]]]  # block index -> its rows with wrong field counts
    stats: dict[str, Stats] = field(default_factory=dict)  # what --append adds the new rows to


@dataclass
class _Block:
    index: int  # the Block's
    names: list[str]
    rows: int
    stats: dict[str, Stats]
    rejects: list[dict[str, Any]]  # each with its `row` in the block, from 1
    seen: int = 0  # rows in the block: kept and rejected


def spill_path(folder: Path, block: Block) -> Path:
    return folder / f"{block.index:05d}.arrow"


def read_spill(folder: Path, block: Block) -> pa.Table:
    """A parsed block as the scan kept it: its columns in header order, then the val mask."""
    with pa.memory_map(str(spill_path(folder, block))) as f:
        return pa.ipc.open_file(f).read_all()


def _check_columns(
    names: list[str], expected: list[str] | None, rel: str, cfg: TableConfig
) -> None:
    if expected is not None and names != expected:
        raise PrepError(
            f"{rel}: columns {names[:8]} differ from the first file's {expected[:8]}. "
            "HINT: pack files of one table together, with the same header"
        )
    wanted = [(cfg.target, "--target"), (cfg.key, "--key")]
    wanted += [(n, "--categorical") for n in cfg.names("categorical")]
    for name, flag in wanted:
        if name is not None and name not in names:
            raise PrepError(
                f"{rel}: {flag} column {name!r} is missing; the columns are "
                f"{', '.join(names[:12])}. HINT: check the name (case matters) or the header"
            )


def scan_block(block: Block, cfg: TableConfig, keep: int | None, folder: Path) -> _Block:
    """One block's columns, rows and statistics, its cells kept in `folder`; `keep`: --limit."""
    coded = set(cfg.names("categorical"))
    rejects: list[dict[str, Any]] = []
    types = {n: pa.dictionary(pa.int32(), pa.binary()) for n in cfg.names("categorical")}
    table = read_block(block, cfg.names("na_values"), rejects, types, cfg.delimiter)
    names = [n for n in table.column_names if n not in set(cfg.names("drop"))]
    text = [as_text(whole(table.column(n)), block.rel, n, block.first_row) for n in names]
    table = pa.table(text, names=names)
    if keep is not None:
        table = table.slice(0, keep)
    seen = table.num_rows + len(rejects)
    table = _without_missing_target(table, cfg.target, block.rel, rejects)
    names = table.column_names
    val = val_mask(table, [cfg.key] if cfg.key else names, cfg.val_fraction)
    stats = {n: Stats() for n in names}
    kept = []
    for n, st in stats.items():
        cells = whole(table.column(n))
        at = (block.rel, block.first_row)
        # A target's classes are every row's values: a class only val holds is still one.
        train = ~val if n != cfg.target else np.ones(len(val), bool)
        kept.append(kept_form(st.update(cells, train, at, n in coded), cfg.float16))
    # The tasks read the columns by position: the last is the split, whatever the names.
    spill = pa.table([*kept, arrow_bools(val)], names=[*names, "val"])
    with (
        pa.OSFile(str(spill_path(folder, block)), "wb") as f,
        pa.ipc.new_file(f, spill.schema) as w,
    ):
        w.write_table(spill)
    return _Block(block.index, names, table.num_rows, stats, rejects, seen)


def _without_missing_target(
    table: pa.Table, target: str | None, rel: str, rejects: list[dict[str, Any]]
) -> pa.Table:
    """The rows whose target is given, the others added to `rejects` (the rows skipped already)."""
    if target is None or target not in table.column_names or not table.column(target).null_count:
        return table  # no target, a missing column (the scan names it), or no empty cell
    missing = numpy_of(whole(table.column(target).is_null()))
    skipped = np.array(sorted(r["row"] for r in rejects), np.int64)
    kept_rows = np.setdiff1d(np.arange(1, table.num_rows + len(skipped) + 1), skipped)
    for row in kept_rows[np.flatnonzero(missing)].tolist():
        found = reject_record(rel, "target", f"the --target column {target!r} is empty")
        rejects.append(found | {"row": row})
    return table.filter(arrow_bools(~missing))


def scan(files: list[tuple[str, Path]], cfg: TableConfig, folder: Path) -> Scan:
    """Read everything once (a block per worker), compressed files decompressed beside `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [(r, decompressed(r, p, folder.parent, i)) for i, (r, p) in enumerate(files)]
    todo = [replace(b, index=i) for i, b in enumerate(b for r, p in files for b in blocks(r, p))]
    results: list[_Block] = []
    if cfg.limit is None and cfg.backend in ("threads", "loky"):  # dask: here, in order
        args = [(b, cfg, None, folder) for b in todo]
        with contextlib.suppress(PrepError):  # an error: the scan in order names its rows
            done = {g.index: g for g in run_tasks(scan_block, args, cfg.n_jobs, cfg.backend)}
            results = [done[i] for i in range(len(todo))]
    found: list[Block] = []
    rejects: dict[int, list[dict[str, Any]]] = {}
    stats: dict[str, Stats] = {}
    names: list[str] | None = None
    kept: dict[str, int] = {}  # rows kept per file
    left = cfg.limit if cfg.limit is not None else -1
    row, rel = 1, None
    for i, block in enumerate(todo):
        row = 1 if block.rel != rel else row
        rel, block = block.rel, replace(block, first_row=row)
        got = results[i] if results else scan_block(block, cfg, left if left >= 0 else None, folder)
        _check_columns(got.names, names, block.rel, cfg)
        names = names or got.names
        for name, st in got.stats.items():
            stats.setdefault(name, Stats()).merge(st, row - 1 if results else 0)
        kept[rel] = kept.get(rel, 0) + got.rows
        rejects[block.index] = [_numbered(r, row - 1) for r in got.rejects]
        if got.rows:
            found.append(replace(block, rows=got.rows))
        row += got.seen
        left -= got.rows if left >= 0 else 0
        if left == 0:
            break
    _check_rows(kept, [r for b in rejects.values() for r in b], cfg)
    assert names is not None  # a file without rows raised above
    _check_delimiter(names, todo[0], cfg)
    coded = set(cfg.names("categorical"))
    columns = [
        decide(n, "target" if n == cfg.target else "num", n in coded, stats[n], cfg.float16)
        for n in names
    ]
    # A block without rows keeps its rejects: they travel with the shard of the next block.
    return Scan(found, columns, _carried(found, rejects), stats)


def _numbered(reject: dict[str, Any], before: int) -> dict[str, Any]:
    """A reject of a block as the file's: `before` rows of the file precede the block."""
    out = dict(reject)
    if out.get("row", 0) >= 1:
        out["row"] += before
        out["message"] = f"row {out['row']}: {out['message']}"
    return out


def _carried(found: list[Block], rejects: dict[int, list[dict[str, Any]]]) -> dict[int, Any]:
    """Rejects by the index of a block with rows: a rowless block's go to the next (or last)."""
    out: dict[int, list[dict[str, Any]]] = {b.index: [] for b in found}
    keys = sorted(out)
    for index, rows in sorted(rejects.items()):
        after = next((k for k in keys if k >= index), keys[-1])
        out[after] += [{k: v for k, v in r.items() if k != "fields"} for r in rows]
    return out


def _check_rows(kept: dict[str, int], rejects: list[dict[str, Any]], cfg: TableConfig) -> None:
    """Say why no row could be read: a file none of whose rows has the header's field count."""
    for rel, rows in kept.items():
        counts = [r for r in rejects if r["path"] == rel and r["reason"] == "fields"]
        if rows or not counts:
            continue
        fields = sorted({r["fields"][0] for r in counts})
        header = counts[0]["fields"][1]
        shown = f"{fields[0]} fields" if len(fields) == 1 else f"{fields[0]}-{fields[-1]} fields"
        raise PrepError(
            f"{rel}: every row has {shown}, the header {header}: no row can be read. HINT: the "
            "first line must name the columns (replace a title or count line by the names), "
            "or give the --delimiter that separates the fields"
        )
    if not any(kept.values()):
        why = "every row was rejected" if rejects else "the files hold a header only"
        raise PrepError(f"no rows in {' '.join(sources_of(cfg.src))}. HINT: {why}, or --limit is 0")


def _check_delimiter(names: list[str], first: Block, cfg: TableConfig) -> None:
    """One text column whose name holds a likely separator: warn, naming it."""
    if len(names) != 1 or first.fmt not in ("csv", "tsv") or cfg.delimiter is not None:
        return
    counts = {c: names[0].count(c) for c in (";", "\t", "|", " ")}
    best = max(counts, key=lambda c: counts[c])
    if counts[best]:
        flag = {" ": "space", "\t": "tab"}.get(best, repr(best))
        warn(
            f"{first.rel}: one column, named {names[0][:60]!r}: the fields may be separated "
            f"by {flag}. HINT: --delimiter {flag}"
        )
