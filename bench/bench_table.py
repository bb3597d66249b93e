"""Rows 8a-8e: `prep table` and TableDataset against in-memory tensors and pandas.

One epoch over 1M rows x 32 columns (24 numeric, 8 categorical) and an integer target, batch
4096 (the smoke run: 20,000 rows). The CSV is made once and cached under bench/out/.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from rows import PREP, Row, run, timed, versus

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
    pack_s = pandas_s = float("inf")
    for _ in range(args.reps):  # interleaved, best of each (the machine is shared)
        pack_s = min(pack_s, timed(lambda: run(cmd)))
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
            "8d prep table vs read_csv + encoding", n / pack_s, n / pandas_s, "row/s", ">= 1.5x"
        ),
        versus("8e table shuffled in_memory vs gather", in_ram, limit, "row/s", ">= 0.5x"),
    ]
