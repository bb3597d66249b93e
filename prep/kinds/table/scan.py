"""The scan: every block of every table file read once, before any shard is written, to decide
the columns' types (prep.kinds.table.types), their train vocabularies and statistics, and each
block's row count (what the shards are planned from)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from prep import PrepError
from prep.kinds.table.config import TableConfig
from prep.kinds.table.sources import Block, blocks, read_block
from prep.kinds.table.split import val_mask
from prep.kinds.table.types import Column, Stats, as_text, decide
from prep.run.parallel import run_tasks


@dataclass
class Scan:
    blocks: list[Block]
    columns: list[Column]  # header order, dropped ones left out
    hashed: list[str]  # the columns the split hashes


def read_text(
    block: Block,
    cfg: TableConfig,
    rejects: list[dict[str, Any]],
    types: dict[str, pa.DataType] | None = None,
) -> pa.Table:
    """A block's rows (at most block.rows when the scan counted them), without the dropped
    columns, text cells checked as UTF-8; CSV columns read as `types` where given."""
    table = read_block(block, cfg.names("na_values"), rejects, types)
    if block.rows:
        table = table.slice(0, block.rows)
    keep = [n for n in table.column_names if n not in set(cfg.names("drop"))]
    cols = [as_text(table.column(n).combine_chunks(), block.rel, n, block.first_row) for n in keep]
    return pa.table(cols, names=keep)


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


def scan_block(
    block: Block, cfg: TableConfig, keep: int | None
) -> tuple[list[str], int, dict[str, Stats]]:
    """One block's columns, row count and statistics (rows numbered from block.first_row);
    `keep`: at most that many rows (--limit)."""
    coded = set(cfg.names("categorical"))
    table = read_text(block, cfg, [], {n: pa.string() for n in coded})  # codes: the text
    if keep is not None:
        table = table.slice(0, keep)
    names = table.column_names
    train = ~val_mask(table, [cfg.key] if cfg.key else names, cfg.val_fraction)
    stats = {n: Stats() for n in names}
    for n, st in stats.items():
        st.update(table.column(n).combine_chunks(), train, (block.rel, block.first_row), n in coded)
    return names, table.num_rows, stats


def _scan_all(todo: list[Block], cfg: TableConfig) -> list[tuple[list[str], int, dict[str, Stats]]]:
    """Every block at once, one task per block (no --limit). The row numbers in a block's
    errors need the rows before it: on an error the scan runs again in order, to name them."""
    found: dict[int, tuple[list[str], int, dict[str, Stats]]] = {}
    args = [(i, b, cfg) for i, b in enumerate(todo)]
    try:
        for i, result in run_tasks(_indexed, args, cfg.n_jobs, "loky"):
            found[i] = result
    except PrepError:
        return []
    return [found[i] for i in range(len(todo))]


def _indexed(i: int, block: Block, cfg: TableConfig) -> tuple[int, Any]:
    return i, scan_block(block, cfg, None)


def scan(files: list[tuple[str, Path]], cfg: TableConfig) -> Scan:
    """Read everything once (memory: a block per worker); see the module docstring."""
    todo = [b for rel, path in files for b in blocks(rel, path)]
    results = _scan_all(todo, cfg) if cfg.limit is None and cfg.backend == "loky" else []
    found: list[Block] = []
    stats: dict[str, Stats] = {}
    names: list[str] | None = None
    left = cfg.limit if cfg.limit is not None else -1
    row, rel = 1, None
    for i, block in enumerate(todo):
        row = 1 if block.rel != rel else row
        rel, block = block.rel, replace(block, first_row=row)
        got, n, block_stats = (
            results[i] if results else scan_block(block, cfg, left if left >= 0 else None)
        )
        _check_columns(got, names, block.rel, cfg)
        names = names or got
        for name, st in block_stats.items():
            stats.setdefault(name, Stats()).merge(st, row - 1 if results else 0)
        if n:
            found.append(replace(block, rows=n))
        row += n
        left -= n if left >= 0 else 0
        if left == 0:
            break
    if names is None or not found:
        raise PrepError(
            f"no rows in {cfg.src}. HINT: the files hold a header only, or --limit is 0"
        )
    coded = set(cfg.names("categorical"))
    columns = [
        decide(n, "target" if n == cfg.target else "num", n in coded, stats[n], cfg.float16)
        for n in names
    ]
    return Scan(found, columns, [cfg.key] if cfg.key else names)
