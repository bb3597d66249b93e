"""`prep import hf SRC OUT`: a Hugging Face dataset on disk (`save_to_disk`, a `datasets` cache
folder, or Parquet files), read with pyarrow alone. A row is an input named `FILE:ROW`, a field
a feature (prep.kinds.importers.hffeatures), each split in its own shards.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from loaders.fields import Label, Scalar
from prep.kinds.importers.config import HFConfig, Tree, image_field
from prep.kinds.importers.hffeatures import (
    Column,
    Unsupported,
    columns_of,
    dict_splits,
    features_of,
    read_object,
    state_files,
    value_of,
)
from prep.kinds.importers.source import SourceKind
from prep.run.config import listed
from prep.run.driver import run
from prep.run.errors import PrepError, Reject, UsageError
from prep.run.grow import adopt_early
from prep.run.samples import Item
from prep.run.summary import RunSummary
from prep.sources.samples import Source, file_stats

USUAL = ("train", "validation", "valid", "dev", "test")
SHARD_NAME = re.compile(r"^(?P<split>[\w.]+?)-\d+-of-\d+$")  # train-00000-of-00004


@dataclass(frozen=True)
class Part:
    split: str | None
    path: Path


def find_parts(src: Path, tree: Tree) -> tuple[str, list[Part]]:
    """The layout ("save_to_disk", "cache" or "parquet") and its files, split by split."""
    if (src / "dataset_dict.json").is_file():
        splits = dict_splits(read_object(src / "dataset_dict.json"), str(src / "dataset_dict.json"))
        for s in splits:
            _inside(tree, s, src / "dataset_dict.json")
        return "save_to_disk", [p for s in splits for p in _arrow_parts(src / s, s, tree)]
    if (src / "state.json").is_file() or any(src.glob("*.arrow")):
        layout = "save_to_disk" if (src / "state.json").is_file() else "cache"
        return layout, _arrow_parts(src, None, tree)
    files = sorted(src.rglob("*.parquet"))
    if not files:
        raise UsageError(
            f"{src}: no dataset_dict.json, state.json, .arrow or .parquet file. HINT: give the "
            "folder of Dataset.save_to_disk, or a folder of Parquet files"
        )
    return "parquet", _in_order([Part(_split_of(src, f), f) for f in files])


def _in_order(parts: list[Part]) -> list[Part]:
    """The usual splits first, train first; the others after, by name."""
    rank: dict[str | None, int] = {s: i for i, s in enumerate(USUAL)}
    return sorted(parts, key=lambda p: (rank.get(p.split, len(USUAL)), p.split or "", p.path))


def _arrow_parts(folder: Path, split: str | None, tree: Tree) -> list[Part]:
    state = folder / "state.json"
    if state.is_file():
        names, named = state_files(read_object(state), str(state))
        for n in names:
            _inside(tree, n, state)
        return [Part(split or named, folder / n) for n in names]
    # The `datasets` cache: NAME-SPLIT[-00000-of-00002].arrow, its splits in its info.
    names = sorted(p.name for p in folder.glob("*.arrow"))
    info = folder / "dataset_info.json"
    splits = read_object(info).get("splits") if info.is_file() else None
    known = [str(k) for k in splits] if isinstance(splits, (dict, list)) else []
    return _in_order([Part(split or _cached_split(n, known), folder / n) for n in names])


def _inside(tree: Tree, name: str, where: Path) -> None:
    """A path `where` names (relative to its folder) stays in SRC."""
    why = tree.why(name, where.parent)
    if why is not None:
        raise PrepError(f"{where}: {why}")


def _cached_split(name: str, known: list[str]) -> str | None:
    """The split of a cache file (json-train.arrow, glue-test-00000-of-00002.arrow)."""
    return next(
        (s for s in known if re.search(rf"-{re.escape(s)}(-\d+-of-\d+)?\.arrow$", name)), None
    )


def _split_of(src: Path, f: Path) -> str | None:
    m = SHARD_NAME.match(f.stem)
    return m["split"] if m else (f.parent.name if f.parent != src else None)


def _schema_and_chunks(path: Path) -> tuple[Any, list[int]]:
    """A file's schema and the rows of each chunk (an Arrow file is one; a Parquet row group)."""
    try:
        if path.suffix == ".parquet":
            meta = pq.ParquetFile(path).metadata
            groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
            return meta.schema.to_arrow_schema(), groups
        table = read_chunk(str(path), 0)
        return table.schema, [table.num_rows]
    except (OSError, pa.ArrowException) as e:
        raise PrepError(f"{path}: cannot read it ({e}). HINT: is the dataset whole?") from e


def list_source(
    src: Path, splits: list[str] | None, only: list[str] | None, allow_outside: bool
) -> tuple[Source, HFRows]:
    """The rows of `src`'s `splits` as inputs, and the make() of its columns `only` (None: all).
    A row's `source` is its split and index as `datasets` numbers it: `train/12` (or `3`)."""
    tree = Tree(src.absolute(), allow_outside)
    layout, parts = find_parts(src, tree)
    if not parts:
        raise UsageError(f"{src}: its dataset_dict.json or state.json lists no data file")
    have = list(dict.fromkeys(str(p.split) for p in parts))
    unknown = [s for s in splits or () if s not in have]
    if unknown:
        raise UsageError(f"{src}: no split {unknown[0]!r}; it has {', '.join(have)}")
    parts = [p for p in parts if splits is None or str(p.split) in splits]
    items: list[Item] = []
    counts: dict[str | None, int] = {}
    features: dict[str, Any] | None = None
    for i, part in enumerate(parts):
        schema, chunks = _schema_and_chunks(part.path)
        mine = features_of(part.path, schema)
        if features is None:
            features = mine
        elif mine != features:
            raise UsageError(
                f"{part.path}: its features differ from {parts[0].path}'s. HINT: import one "
                "configuration (folder) at a time"
            )
        rel, row = Path(os.path.relpath(part.path, src)).as_posix(), 0
        at = counts.get(part.split, 0)  # the split's rows before this file's
        for c, n in enumerate(chunks):
            for r in range(n):
                index = at + row + r
                where = str(index) if part.split is None else f"{part.split}/{index}"
                items.append(Item(f"{rel}:{row + r}", (i, c, r), part.split, where))
            row += n
        counts[part.split] = at + row
    assert features is not None
    columns = unlabeled(_columns(src, features, only), [p.path for p in parts])
    held = {c.name: c.source() for c in columns}
    extra = {"hf": {"layout": layout, "features": features, "columns": held}}
    rows = HFRows(tuple(str(p.path) for p in parts), tuple(columns), tree)
    return Source(items, counts, [], file_stats([p.path for p in parts]), extra), rows


def _columns(src: Path, features: dict[str, Any], only: list[str] | None) -> list[Column]:
    unknown = [c for c in only or () if c not in features]
    if unknown:
        raise UsageError(f"{src}: no column {unknown[0]!r}; it has {', '.join(features)}")
    chosen = features if only is None else {c: features[c] for c in only}
    try:
        return columns_of(chosen, src)
    except Unsupported as e:
        raise UsageError(
            f"{src}: {e}. HINT: prep import hf reads Image, ClassLabel, Value, List/Sequence, "
            "Array2D-5D and dicts of them; leave that column out with --columns"
        ) from None


def unlabeled(columns: list[Column], files: list[Path]) -> list[Column]:
    """The columns, a ClassLabel column that holds -1 (`datasets`' "no label", in test splits)
    as an int64 Scalar: -1 read back as `datasets` gives it; its names stay in extra.hf."""
    labels = [c for c in columns if isinstance(c.field, Label) and len(c.path) == 1]
    if not labels:
        return columns
    names = [c.path[0][1] for c in labels]
    low: dict[str, int] = {}
    for path in files:
        for chunk in range(len(_schema_and_chunks(path)[1])):
            table = read_chunk(str(path), chunk, names)
            for name in names:
                least = pc.min(table.column(name)).as_py()
                if least is not None:
                    low[name] = min(low.get(name, 0), least)
    return [
        replace(c, field=Scalar("int64")) if c in labels and low.get(c.path[0][1], 0) < 0 else c
        for c in columns
    ]


@dataclass(frozen=True)
class HFRows:
    """make() of the import: (file, chunk, row) -> the sample's values by field name."""

    files: tuple[str, ...]
    columns: tuple[Column, ...]
    tree: Tree  # an Image's path is relative to it, and stays inside
    run: str = field(default_factory=lambda: uuid.uuid4().hex, repr=False, compare=False)

    def __call__(self, ref: tuple[int, int, int]) -> dict[str, Any]:
        part, chunk, row = ref
        names = tuple(dict.fromkeys(c.path[0][1] for c in self.columns))  # the file's columns
        table = _chunk(self.run, self.files[part], chunk, names)
        values = table.slice(row, 1).to_pylist()[0]
        out = {}
        for c in self.columns:
            try:
                out[c.name] = value_of(values, c, self.tree)
            except (ValueError, TypeError) as e:  # a null inside a list of numbers
                raise Reject(f"field {c.name}: {e}", "field_type") from None
        return out


@lru_cache(maxsize=8)
def _chunk(run: str, path: str, chunk: int, names: tuple[str, ...]) -> Any:
    """read_chunk once a process and run."""
    return read_chunk(path, chunk, list(names))


def read_chunk(path: str, chunk: int, names: list[str] | None = None) -> Any:
    """An Arrow file's table (memory-mapped) or a Parquet row group, of columns `names`."""
    if path.endswith(".parquet"):
        return pq.ParquetFile(path).read_row_group(chunk, columns=names)
    mapped = pa.memory_map(path)  # the table's buffers keep the mapping open
    try:
        table = pa.ipc.open_stream(mapped).read_all()
    except pa.ArrowInvalid:  # the IPC file format (with a footer), which some tools write
        table = pa.ipc.open_file(mapped).read_all()
    return table if names is None else table.select(names)


def import_hf(cfg: HFConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    cfg.validate()
    adopt_early(cfg)  # the fields below follow the options
    src = Path(str(cfg.src))
    if not src.is_dir():
        raise UsageError(f"{src}: not a folder. HINT: give a save_to_disk or Parquet folder")
    splits = listed(cfg.splits, "--splits", str) if cfg.splits else None
    only = listed(cfg.columns, "--columns", str) if cfg.columns else None
    source, rows = list_source(src, splits, only, cfg.allow_outside)
    image = image_field(cfg)
    fields = {c.name: c.field or image for c in rows.columns}
    try:
        return run(SourceKind(cfg, rows, fields, source), show_progress, profile)
    finally:
        _chunk.cache_clear()  # a Parquet row group is in memory
