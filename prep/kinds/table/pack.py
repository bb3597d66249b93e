"""prep table: the tabular kind of the run driver. `prepare` parses every row once
(prep.kinds.table.scan), keeping parsed blocks in the run folder; a shard is blocks of about
--shard-rows rows, written as one .npy per column (num_J, cat_K, target) and split."""

from __future__ import annotations

import glob
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from loaders.fields import Column as ColumnField
from loaders.fields import declared
from loaders.format.index import stem
from prep.kinds.table.append import COLUMNS, merged_columns, state_record
from prep.kinds.table.config import TableConfig
from prep.kinds.table.scan import BLOCKS, Scan, read_spill, scan
from prep.media.table.arrow import arrow_texts, numpy_of, whole
from prep.media.table.types import Column, encode
from prep.run.driver import run
from prep.run.errors import PrepError
from prep.run.grow import Parent, check_fields, file_identity
from prep.run.inputs import warn
from prep.run.kind import Inputs, Kind, array_specs, fingerprint
from prep.run.profile import stage
from prep.run.sharding import grouped
from prep.run.shardwriter import ShardFiles, shard_task, split_record, writing
from prep.run.staging import RUN_DIR
from prep.run.summary import RunSummary
from prep.sources.table import Block, list_tables, sources_of

SPLITS = ("train", "val")


def column_names(columns: list[Column]) -> dict[str, Column]:
    """Field (and array) name -> column: num_{j} and cat_{k} in header order, then target."""
    names: dict[str, Column] = {}
    names |= {f"num_{j}": c for j, c in enumerate(c for c in columns if c.role == "num")}
    names |= {f"cat_{k}": c for k, c in enumerate(c for c in columns if c.role == "cat")}
    names |= {"target": c for c in columns if c.role == "target"}  # noqa: B035 - one at most
    return names


def table_fields(columns: list[Column], missing_mask: bool) -> dict[str, ColumnField]:
    """A column field a column, as scanned; `missing_mask`: NAME_missing where cells are."""
    return {
        name: ColumnField(
            name=c.name,
            role=c.role,
            dtype=c.dtype,
            type=c.kind,
            missing=c.missing,
            lo=c.lo,
            hi=c.hi,
            mean=c.mean,
            std=c.std,
            vocab=None if c.vocab is None else tuple(c.vocab),
            counts=None if c.counts is None else tuple(c.counts),
            first_code=c.first_code,
            mask=missing_mask and c.role == "num" and c.missing > 0,
        )
        for name, c in column_names(columns).items()
    }


@shard_task
def table_shard(
    index: int,
    shard: list[Block],
    fields: dict[str, ColumnField],
    columns: list[Column],
    rejects: list[dict[str, Any]],
    staging: Path,
) -> dict[str, Any]:
    """`shard`'s parsed blocks into shard `index` of each split; its record. `fields`: the
    kind's (made once: a field checks each of its vocabulary's values)."""
    specs = array_specs(fields)
    vocabs = {c.name: arrow_texts(c.vocab) for c in columns if c.vocab is not None}
    named, position = column_names(columns), {c.name: i for i, c in enumerate(columns)}
    with stage("read"):  # memory maps: the rows are read as they are encoded
        tables = [read_spill(staging / RUN_DIR / BLOCKS, b) for b in shard]
        vals = [numpy_of(whole(t.column(len(columns)))) for t in tables]  # the split
    rows = {"train": sum(int((~v).sum()) for v in vals), "val": sum(int(v.sum()) for v in vals)}
    splits = {s: ShardFiles(staging, stem(s, index)) for s in SPLITS if rows[s]}
    with writing(splits.values()):
        with stage("write"):  # a split's files only where it has rows
            for files in splits.values():
                files.open_all(specs)
        for table, val in zip(tables, vals, strict=True):
            with stage("encode"):  # the block's arrays in their stored dtypes
                encoded = {}
                for name, col in named.items():
                    cells = whole(table.column(position[col.name]))
                    encoded[name] = encode(cells, col, vocabs.get(col.name))
                    if fields[name].mask:
                        encoded[f"{name}_missing"] = numpy_of(cells.is_null()).view(np.uint8)
            with stage("write"):
                if not val.any():
                    splits["train"].extend(encoded)
                    continue
                if not val.all():
                    splits["train"].extend({n: a[~val] for n, a in encoded.items()})
                splits["val"].extend({n: a[val] for n, a in encoded.items()})
    done = [files.publish(rows[s], s) for s, files in splits.items()]
    rows_seen = sum(b.rows for b in shard) + len(rejects)
    return split_record(staging, index, done, rejects, rows=rows_seen)


class TableSummary(RunSummary):
    def held(self) -> str:
        """--append: the files the dataset holds (the summary's inputs are rows)."""
        n = self.skipped
        return "" if n is None else f" ({n} file{'s' if n != 1 else ''} already in the dataset)"


class TableKind(Kind[TableConfig, list[Block]]):
    command = "table"
    unit = "row"
    noun = "rows"
    counted = "rows"
    summary = TableSummary
    prepare_stage = "scan"
    threads = True  # parsing (pyarrow), encoding, hashing and writing release the GIL
    task = staticmethod(table_shard)
    appendable = True  # new files: new shards; vocabularies and statistics grow (table.append)

    def sources(self) -> list[Path]:
        srcs = sources_of(self.cfg.src)
        return [Path(p) for s in srcs for p in (glob.glob(s) if glob.has_magic(s) else [s])]

    def list_inputs(self) -> Inputs:
        self.files, rejects = list_tables(sources_of(self.cfg.src))
        if not self.files:
            raise PrepError(
                f"no readable table file in {' '.join(sources_of(self.cfg.src))} "
                f"({len(rejects)} rejected). HINT: SRC is .csv/.tsv/.jsonl(.gz)/.parquet files, "
                "folders of them or quoted globs"
            )
        seen = [(rel, p.stat().st_size, p.stat().st_mtime_ns) for rel, p in self.files]
        return Inputs(len(self.files), rejects, fingerprint(seen))

    def identities(self) -> dict[str, str]:
        return {rel: file_identity(path) for rel, path in self.files}

    def grow(self, parent: Parent, fresh: set[str]) -> int:
        self.parent = parent
        self.files = [(rel, path) for rel, path in self.files if rel in fresh]
        changed = [rel for rel, _ in self.files if rel in parent.inputs]
        if changed:  # rows added to a packed file: the old rows would be there twice
            warn(
                f"{changed[0]}{f' and {len(changed) - 1} more' if len(changed) > 1 else ''} "
                "changed since the dataset packed it: all its rows are packed again, beside the "
                "old ones. HINT: put new rows in new files, or repack with --overwrite"
            )
        self.fields = dict(declared(parent.manifest))  # until `prepare` scans the new rows
        return len(self.files)

    def prepare(self, staging: Path, resume: bool) -> None:
        self.scan: Scan = scan(self.files, self.cfg, staging / RUN_DIR / BLOCKS)
        if self.parent is not None:
            self.scan.columns, self.scan.stats = merged_columns(
                self.parent, self.scan.stats, self.cfg
            )
        self.fields = dict(table_fields(self.scan.columns, self.cfg.missing_mask))
        if self.parent is not None:
            check_fields(self.parent.manifest, self.described(), array_specs(self.fields))

    def before(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The shards' records, and the columns' statistics a later append adds to."""
        kept = [r for r in super().before(records) if COLUMNS not in r]
        return [*kept, state_record(self.scan.stats)]

    def plan(self) -> list[list[Block]]:
        return grouped(self.scan.blocks, attrgetter("rows"), self.cfg.shard_rows)

    def weight(self, shard: list[Block]) -> int:
        return sum(b.rows for b in shard)

    def task_args(self, index: int, shard: list[Block], staging: Path) -> tuple[Any, ...]:
        rejects = [r for b in shard for r in self.scan.rejects[b.index]]
        return (index, shard, self.fields, self.scan.columns, rejects, staging)

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {} if self.cfg.target is None else {"target": self.cfg.target}


def pack_table(cfg: TableConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    """Pack cfg.src into cfg.out, Arrow on the system malloc: mimalloc hands a parse's freed
    bytes back and faults them in again (the bench table: a fifth less kernel time)."""
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        summary = run(TableKind(cfg), show_progress, profile)
        summary.inputs -= summary.skipped or 0  # the driver added the files to the rows
        return summary
    finally:
        pa.set_memory_pool(previous)
