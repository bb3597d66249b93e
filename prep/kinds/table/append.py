"""`prep table --append`: the columns of the grown table from the scan statistics of the old rows
(kept in the dataset's inputs.json) merged with the new rows'; the same numbers a scan of all
the rows gives (mean and std from the summed n, sum and sum of squares), except that a
category's vocabulary keeps its old codes and lists new values after them."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa

from prep.kinds.table.config import TableConfig
from prep.media.table.types import Column, Stats, decide
from prep.run.errors import PrepError
from prep.run.grow import Parent, grown_classes

COLUMNS = "columns"  # the state record that holds each column's scan statistics

Said = dict[str, Any]


def said(stats: dict[str, Stats]) -> Said:
    """The scan statistics as JSON (a text column's counts by value)."""
    out = {}
    for name, st in stats.items():
        d = {f.name: getattr(st, f.name) for f in dataclasses.fields(st) if f.name != "counts"}
        d["vocab"], d["counts"] = st.vocab()
        out[name] = d
    return out


def restored(d: Said) -> Stats:
    kept = {k: v for k, v in d.items() if k not in ("vocab", "counts")}
    kept["bad"] = tuple(kept["bad"]) if kept.get("bad") else None
    st = Stats(**kept)
    if d["vocab"]:
        st.counts = [(pa.array(d["vocab"], pa.string()), np.asarray(d["counts"], np.int64))]
    return st


def state_record(stats: dict[str, Stats]) -> dict[str, Any]:
    """The record inputs.json keeps: no shard (count 0), the columns' statistics."""
    return {"shard": {"split": None, "count": 0}, COLUMNS: said(stats)}


def old_stats(parent: Parent) -> dict[str, Stats]:
    found = [r[COLUMNS] for r in parent.records if COLUMNS in r]
    if not found:
        raise PrepError(
            "cannot append: the dataset's inputs.json holds no column statistics. HINT: repack "
            "it once with --overwrite"
        )
    return {name: restored(d) for name, d in found[-1].items()}


def merged_columns(
    parent: Parent, new: dict[str, Stats], cfg: TableConfig
) -> tuple[list[Column], dict[str, Stats]]:
    """The grown table's columns and statistics: old and new rows' statistics summed, then
    decided as one scan decides; a vocabulary's old values keep their codes."""
    old = old_stats(parent)
    if sorted(old) != sorted(new):  # (inputs.json sorts them; check_fields checks the order)
        raise PrepError(
            f"cannot append: the new files' columns {list(new)[:8]} differ from the dataset's "
            f"{list(old)[:8]}. HINT: append files of the same table (the same header)"
        )
    was = {f["name"]: f for f in parent.manifest.fields.values() if f.get("kind") == "column"}
    coded = set(cfg.names("categorical"))
    columns = []
    for name, st in new.items():
        old[name].merge(st, 0)
        role = "target" if name == cfg.target else "num"
        col = decide(name, role, name in coded, old[name], cfg.float16)
        old_col = was.get(name, {})
        if old_col and (col.kind, col.dtype) != (old_col.get("type"), old_col.get("dtype")):
            raise PrepError(
                f"cannot append: column {name} of all the rows is {col.kind} stored as "
                f"{col.dtype}, the dataset stores {old_col.get('type')} as "
                f"{old_col.get('dtype')} (the new rows hold other values). HINT: repack all "
                "the files with --overwrite"
            )
        if col.vocab is not None and old_col.get("vocab") is not None:  # old codes kept
            counts = dict(zip(col.vocab, col.counts or [], strict=True))
            col.vocab = grown_classes(old_col["vocab"], col.vocab)
            col.counts = [counts.get(v, 0) for v in col.vocab]  # the same values: same dtype
        columns.append(col)
    return columns, old
