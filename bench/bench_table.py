"""Rows 8a-8g: `prep table` and TableDataset against in-memory tensors and pandas, and the CSV
parsers that exist (prep's C path, polars, DuckDB where installed) against pyarrow's on one block.
8d times `prep table` and the pandas script alike, each a fresh process as a user runs it; 8g
times the pandas function again inside this warm process (its imports and heap already there).

One epoch over 1M rows x 32 columns (24 numeric, 8 categorical) and an integer target, batch
4096 (the smoke run: 20,000 rows). The CSV is made once and cached under bench/out/.
"""

from __future__ import annotations

import argparse
import io
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rows import PREP, Row, info, run, timed, versus

BATCH = 4096
NUM, CAT = 24, 8


def make_csv(path: Path, n: int) -> None:
    """24 float columns (2 decimals), 8 text columns of 10 to 10^4 values, a 0/1 target."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    if path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    cols: dict[str, pa.Array] = {}
    for j in range(NUM):
        cols[f"f{j}"] = pa.array(np.round(rng.normal(0, 10, n), 2))
    for k in range(CAT):
        size = [10, 100, 1000, 10000][k % 4]
        vocab = pa.array([f"v{i}" for i in range(size)])
        cols[f"c{k}"] = vocab.take(pa.array(rng.integers(0, size, n)))
    cols["y"] = pa.array(rng.integers(0, 2, n))
    pcsv.write_csv(pa.table(cols), path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


def pandas_pack(path: Path) -> tuple[object, object, object]:
    """What users write: read_csv, then codes and float32/int64 arrays."""
    import pandas as pd

    df = pd.read_csv(path)
    x = df[[f"f{j}" for j in range(NUM)]].to_numpy(np.float32)
    c = np.stack([df[f"c{k}"].astype("category").cat.codes.to_numpy() for k in range(CAT)], 1)
    return x, c.astype(np.int64), df["y"].to_numpy(np.int64)


def epoch_rate(loader: object, n: int) -> float:
    start = time.perf_counter()
    for _ in loader:  # type: ignore[attr-defined]
        pass
    return n / (time.perf_counter() - start)


def limit_rate(x: np.ndarray, c: np.ndarray, y: np.ndarray) -> float:
    """The limit: batches gathered from in-memory float32/int64 tensors, x[perm[i:i + B]]."""
    import torch

    xt, ct, yt = torch.from_numpy(x), torch.from_numpy(c), torch.from_numpy(y)
    perm = torch.randperm(len(xt))
    start = time.perf_counter()
    for i in range(0, len(xt), BATCH):
        idx = perm[i : i + BATCH]
        _ = xt[idx], ct[idx], yt[idx]
    return len(xt) / (time.perf_counter() - start)


def pandas_rows_rate(path: Path, rows: int) -> float:
    """A per-row __getitem__ Dataset over a DataFrame through the default DataLoader."""
    import pandas as pd
    import torch
    from torch.utils.data import DataLoader, Dataset

    df = pd.read_csv(path, nrows=rows)
    nums, cats = [f"f{j}" for j in range(NUM)], [f"c{k}" for k in range(CAT)]
    for c in cats:
        df[c] = df[c].astype("category").cat.codes

    class Rows(Dataset[tuple[torch.Tensor, ...]]):
        def __len__(self) -> int:
            return len(df)

        def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
            row = df.iloc[i]
            return (
                torch.tensor(row[nums].to_numpy(np.float32)),
                torch.tensor(row[cats].to_numpy(np.int64)),
                torch.tensor(int(row["y"])),
            )

    return epoch_rate(DataLoader(Rows(), batch_size=BATCH, shuffle=True), rows)


def _block(path: Path, size: int = 16 << 20) -> tuple[list[str], bytes]:
    """The header's names and the first block of rows, as `prep table` cuts one (16 MB)."""
    with open(path, "rb") as f:
        head, data = f.readline(), f.read(size)
    return [n.strip('"') for n in head.decode().strip().split(",")], data[: data.rfind(b"\n") + 1]


def block_parsers(names: list[str], data: bytes, scratch: Path) -> dict[str, Callable[[], object]]:
    """One block to an Arrow table on one thread, each column typed from all its rows (what
    `prep table` guarantees): pyarrow as prep.sources.table calls it, prep's C path (prep._csv,
    where built), and polars and DuckDB where installed, each with full-column inference and
    with their default sampled one."""
    import pyarrow.csv as pcsv

    from prep.sources import table

    read = pcsv.ReadOptions(column_names=names, use_threads=False)
    parse = pcsv.ParseOptions(newlines_in_values=b'"' in data, invalid_row_handler=lambda r: "skip")
    convert = pcsv.ConvertOptions(auto_dict_encode=True, auto_dict_max_cardinality=2**31 - 1)
    found = {"pyarrow": lambda: pcsv.read_csv(io.BytesIO(data), read, parse, convert)}
    if table.fast_parse is not None:
        found["prep C path"] = lambda: table._fast_csv(data, names, ",", [], {})
    try:
        import polars as pl
    except ImportError:
        pl = None
    if pl is not None:
        opts = {"has_header": False, "new_columns": names}
        found["polars"] = lambda: pl.read_csv(data, infer_schema_length=None, **opts).to_arrow()
        found["polars sampled"] = lambda: pl.read_csv(data, **opts).to_arrow()
    try:
        import duckdb
    except ImportError:
        duckdb = None
    if duckdb is not None:
        con = duckdb.connect(config={"threads": 1})
        scratch.write_bytes(data)  # DuckDB's read_csv reads a path
        sql = f"select * from read_csv('{scratch}', header=false, names={names!r}"
        found["duckdb"] = lambda: con.sql(sql + ", sample_size=-1)").to_arrow_table()
        found["duckdb sampled"] = lambda: con.sql(sql + ")").to_arrow_table()
    return found


def parser_rows(csv: Path, reps: int) -> list[Row]:
    """Rows 8f: CSV parsers on one 16 MB block of the bench CSV, CPU seconds on one thread
    (what a --jobs worker spends; the shared machine's wall time is noise), vs pyarrow."""
    names, data = _block(csv)
    parsers = block_parsers(names, data, csv.with_suffix(".block.csv"))
    cpu: dict[str, list[float]] = {k: [] for k in parsers}
    for _ in range(max(3, reps)):  # interleaved
        for name, parse in parsers.items():
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            parse()
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu[name].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    mb = len(data) / 1e6
    rate = {k: mb / statistics.median(v) for k, v in cpu.items()}
    return [
        info(f"8f CSV block parse {k} vs pyarrow", r, rate["pyarrow"], "MB/s", "CPU, 1 thread")
        for k, r in rate.items()
        if k != "pyarrow"
    ]


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    import torch

    from loaders import TableDataset, make_loader

    torch.set_num_threads(1)  # the limit and ours, one thread each
    n = 2_000 if args.smoke else 1_000_000
    csv = work.parent / "table" / f"rows{n}.csv"
    make_csv(csv, n)
    out = work / "table-packed"
    cmd = [*PREP, "table", str(csv), str(out), "--target", "y", "--overwrite", "-q"]
    cmd += ["--jobs", str(args.jobs)]
    script = [sys.executable, __file__, str(csv)]  # pandas_pack in a fresh process
    pack_s = script_s = pandas_s = float("inf")
    for _ in range(args.reps):  # interleaved, best of each (the machine is shared)
        pack_s = min(pack_s, timed(lambda: run(cmd)))
        script_s = min(script_s, timed(lambda: run(script)))
        pandas_s = min(pandas_s, timed(lambda: pandas_pack(csv)))
    x, c, y = pandas_pack(csv)
    ds, memory = TableDataset(out), TableDataset(out, in_memory=True)
    best = {"limit": 0.0, "shuffled": 0.0, "blocks": 0.0, "in_ram": 0.0}
    for s in range(args.reps):  # interleaved too
        best["limit"] = max(best["limit"], limit_rate(x, c, y))
        shuffled = make_loader(ds, BATCH, shuffle=True, seed=s)
        best["shuffled"] = max(best["shuffled"], epoch_rate(shuffled, n))
        blocks = make_loader(ds, BATCH, order="blocks", seed=s)
        best["blocks"] = max(best["blocks"], epoch_rate(blocks, n))
        in_ram = make_loader(memory, BATCH, shuffle=True, seed=s)
        best["in_ram"] = max(best["in_ram"], epoch_rate(in_ram, n))
    limit, shuffled, blocks, in_ram = best.values()
    per_row = pandas_rows_rate(csv, min(n, 20_000))
    return [
        versus("8a table epoch shuffled vs in-memory gather", shuffled, limit, "row/s", ">= 0.5x"),
        versus("8b table epoch blocks vs in-memory gather", blocks, limit, "row/s", ">= 0.9x"),
        versus(
            "8c table shuffled vs pandas per-row Dataset", shuffled, per_row, "row/s", ">= 100x"
        ),
        versus(
            "8d prep table vs read_csv + encoding script",
            n / pack_s,
            n / script_s,
            "row/s",
            ">= 1.5x",
        ),
        versus("8e table shuffled in_memory vs gather", in_ram, limit, "row/s", ">= 0.5x"),
        info(
            "8g prep table vs read_csv + encoding, warm",
            n / pack_s,
            n / pandas_s,
            "row/s",
            "pandas in-process",
        ),
        *parser_rows(csv, args.reps),
    ]


if __name__ == "__main__":  # 8d's baseline: what a user's script does, from its start
    pandas_pack(Path(sys.argv[1]))
