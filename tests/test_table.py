"""prep table and TableDataset: type rules, vocabularies, splits, jobs, bad input, round trips."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from loaders import TableDataset, make_loader
from loaders.format import read_manifest
from loaders.read.samplers import BLOCK_ROWS, epoch_order
from prep import PrepError
from prep.cli.main import app
from prep.kinds.table.config import TableConfig
from prep.kinds.table.pack import pack_table
from prep.media.table.types import code_dtype, float_dtype, int_dtype


def _pack(src: Path, out: Path, **kw: Any) -> Path:
    cfg = TableConfig(src=str(src), out=str(out), jobs=1, **kw)
    pack_table(cfg, show_progress=False)
    return out


def _table(n: int = 300, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    price = rng.normal(10, 3, n)
    price[::7] = np.nan
    return pa.table(
        {
            "id": np.arange(n),
            "small": rng.integers(0, 256, n),
            "neg": rng.integers(-128, 128, n),
            "price": pa.array(price, from_pandas=True),
            "flag": rng.random(n) < 0.5,
            "city": pa.array([["oslo", "rome", None, "lima"][i % 4] for i in range(n)]),
            "day": pa.array(np.datetime64("2024-01-01") + rng.integers(0, 30, n)).cast(
                pa.timestamp("ns")
            ),
            "label": rng.integers(0, 3, n),
        }
    )


def _write(table: pa.Table, path: Path) -> Path:
    fmt = path.suffix
    if fmt == ".parquet":
        pq.write_table(table, path, row_group_size=100)
    elif fmt == ".jsonl":
        rows = table.to_pylist()
        text = "".join(json.dumps(r, default=str) + "\n" for r in rows)
        path.write_text(text.replace("NaN", "null"))
    else:
        opts = pcsv.WriteOptions(delimiter="\t" if fmt == ".tsv" else ",", quoting_style="none")
        pcsv.write_csv(table, path, opts)
    return path


# -- the type rules, at their boundaries ---------------------------------------------------


def test_type_rules_at_boundaries() -> None:
    assert int_dtype(0, 255) == "uint8" and int_dtype(0, 256) == "uint16"
    assert int_dtype(0, 2**32 - 1) == "uint32" and int_dtype(0, 2**32) == "uint64"
    assert int_dtype(-128, 127) == "int8" and int_dtype(-129, 0) == "int16"
    assert int_dtype(-1, 128) == "int16" and int_dtype(-(2**31), 0) == "int32"
    assert code_dtype(254) == "uint8" and code_dtype(255) == "uint16"  # +2 reserved codes
    assert code_dtype(2**32 - 2) == "uint32"
    with pytest.raises(PrepError, match="do not fit uint32 codes"):
        code_dtype(2**32 - 1)  # a categorical with more than 2^32 values
    assert float_dtype(True, 65504.0) == "float16" and float_dtype(True, 65505.0) == "float32"
    assert float_dtype(False, 1.0) == "float32"


def test_stored_dtypes(tmp_path: Path) -> None:
    t = _table()
    t = t.append_column("big", pa.array(np.arange(t.num_rows) * 300))
    out = _pack(_write(t, tmp_path / "t.csv"), tmp_path / "out", target="label", float16=True)
    m = read_manifest(out)
    cols = {f["name"]: f for f in m.fields.values()}  # a column field a column
    names = {f["name"]: k for k, f in m.fields.items()}
    dtype = {c: m.arrays[names[c]].dtype for c in cols}
    assert dtype["small"] == "uint8" and dtype["neg"] == "int8" and dtype["big"] == "uint32"
    assert dtype["price"] == "float16"  # missing values: a float, NaN for missing
    assert dtype["flag"] == "uint8" and dtype["day"] == "int64" and dtype["city"] == "uint8"
    assert dtype["label"] == "uint8" and cols["city"]["vocab"] == ["lima", "oslo", "rome"]
    assert cols["price"]["missing"] == len(range(0, t.num_rows, 7))


# -- a batch equals the source rows decoded independently with pyarrow ----------------------


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_batch_equals_source(tmp_path: Path, suffix: str) -> None:
    t = _table()
    src = _write(t, tmp_path / f"t{suffix}")
    ds = TableDataset(_pack(src, tmp_path / "out", target="label", drop="id"))
    assert ds.numeric_columns == ["small", "neg", "price", "flag", "day"]
    assert ds.categorical_columns == ["city"] and ds.target == "label"
    order = np.random.default_rng(1).permutation(len(ds))
    x_num, x_cat, y = ds.__getitems__(order).tensors
    want = np.stack(
        [
            t["small"].to_numpy(),
            t["neg"].to_numpy(),
            t["price"].to_numpy(zero_copy_only=False),
            t["flag"].to_numpy(zero_copy_only=False),
            t["day"].cast(pa.int64()).to_numpy(),
        ],
        axis=1,
    ).astype(np.float32)[order]
    np.testing.assert_array_equal(x_num.numpy(), want)
    assert x_num.dtype.is_floating_point and y.dtype == x_cat.dtype  # float32; int64
    assert ds.decode("city", x_cat[:, 0]) == [t["city"].to_pylist()[i] for i in order]
    np.testing.assert_array_equal(y.numpy(), t["label"].to_numpy()[order])


def test_loader_orders_read_the_same_rows(tmp_path: Path) -> None:
    out = _pack(_write(_table(900), tmp_path / "t.parquet"), tmp_path / "o", shard_rows=250)
    ds = TableDataset(out)
    full = ds.__getitems__(np.arange(len(ds))).tensors[0].numpy()
    for order in ("sequential", "blocks", "random"):
        rows = np.concatenate(
            [b[0].numpy() for b in make_loader(ds, batch_size=128, order=order, seed=3)]
        )
        key = np.lexsort(rows.T[::-1])
        np.testing.assert_array_equal(rows[key], full[np.lexsort(full.T[::-1])])


def test_in_memory_reads_the_same_batches(tmp_path: Path) -> None:
    out = _pack(
        _write(_table(500), tmp_path / "t.csv"),
        tmp_path / "o",
        target="label",
        shard_rows=200,
        missing_mask=True,
    )
    order = np.random.default_rng(2).permutation(500)[:300]
    mapped = TableDataset(out, missing_mask=True).__getitems__(order).tensors
    memory = TableDataset(out, missing_mask=True, in_memory=True).__getitems__(order).tensors
    assert len(mapped) == len(memory) == 4
    for a, b in zip(mapped, memory, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_blocks_order_is_contiguous_runs() -> None:
    sizes = [BLOCK_ROWS * 2 + 5, 7]
    order = epoch_order(sizes, "blocks", seed=0, epoch=0)
    assert sorted(order.tolist()) == list(range(sum(sizes)))
    assert 1 + np.count_nonzero(np.diff(order) != 1) <= 4  # 4 blocks, each one run


# -- vocabulary, split, jobs ---------------------------------------------------------------


def test_vocabulary_round_trip_and_unseen(tmp_path: Path) -> None:
    n = 400
    cities = [f"c{i % 50}" if i % 9 else None for i in range(n)]
    t = pa.table({"id": np.arange(n), "city": cities, "y": np.arange(n) % 2})
    out = _pack(_write(t, tmp_path / "t.csv"), tmp_path / "o", val_fraction=0.3, key="id")
    train, val = TableDataset(out, "train"), TableDataset(out, "val")
    seen = set()
    for ds in (train, val):
        x_num, x_cat = ds.__getitems__(np.arange(len(ds))).tensors[:2]
        ids = x_num[:, 0].numpy().astype(int)
        decoded = ds.decode("city", x_cat[:, 0])
        for i, value in zip(ids, decoded, strict=True):
            if ds is train:
                assert value == cities[i]
                seen.add(value)
            else:  # vocabulary fitted on train: a value only val holds is code 1
                assert value == (
                    cities[i] if cities[i] in seen or cities[i] is None else "<unseen>"
                )
    assert train.embedding_sizes() == {"city": len(train.vocab["city"]) + 2}


def _val_ids(out: Path) -> set[int]:
    ds = TableDataset(out, "val")
    return set(ds.__getitems__(np.arange(len(ds))).tensors[0][:, 0].numpy().astype(int).tolist())


def test_split_stable_under_file_reordering(tmp_path: Path) -> None:
    t = _table(600)
    a, b = t.slice(0, 300), t.slice(300)
    for folder, first, second in (("ab", a, b), ("ba", b, a)):
        (tmp_path / folder).mkdir()
        _write(first, tmp_path / folder / "1.csv")
        _write(second, tmp_path / folder / "2.csv")
    for key in (None, "id"):
        kw = {"val_fraction": 0.2, "key": key}
        ab = _val_ids(_pack(tmp_path / "ab", tmp_path / f"o-ab-{key}", **kw))
        ba = _val_ids(_pack(tmp_path / "ba", tmp_path / f"o-ba-{key}", **kw))
        assert ab == ba and 60 < len(ab) < 180


def test_same_bytes_for_any_jobs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        _write(_table(300, seed=i), src / f"{i}.csv")
    outs = []
    for jobs in (1, 2):
        cfg = TableConfig(
            src=str(src),
            out=str(tmp_path / f"o{jobs}"),
            jobs=jobs,
            shard_rows=200,
            val_fraction=0.1,
            missing_mask=True,
            target="label",
        )
        pack_table(cfg, show_progress=False)
        outs.append(tmp_path / f"o{jobs}")
    names = sorted(p.name for p in outs[0].iterdir())
    assert names == sorted(p.name for p in outs[1].iterdir()) and len(names) > 10
    for name in names:
        one, two = ((o / name).read_bytes() for o in outs)
        if name == "manifest.json":  # the config holds OUT
            one, two = (x.replace(f"/o{j}".encode(), b"/o") for x, j in ((one, 1), (two, 2)))
        assert one == two, name
    ds = TableDataset(outs[0], missing_mask=True)
    x_num, _, _, missing = ds.__getitems__(np.arange(len(ds))).tensors
    assert bool((missing == x_num.isnan()).all()) and bool(missing.any())


# -- bad input ------------------------------------------------------------------------------


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["table", *args, "-q"])


def test_rows_with_wrong_field_counts_are_rejects(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_text("a,b\n" + "".join(f"{i},{i}\n" for i in range(200)) + "1\n1,2,3\n")
    out = _pack(src, tmp_path / "o", max_rejects=0.05)
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in lines] == ["fields", "fields"]
    assert "1 fields, the header 2" in lines[0]["message"] and len(TableDataset(out)) == 200


def test_text_in_a_numeric_column(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_text("a,price\n1,2.5\n2,N/A\n3,4\n")
    r = _cli(str(src), str(tmp_path / "o"))
    assert r.exit_code == 1
    assert "t.csv: row 2, column price: 'N/A' is not a number" in r.output
    assert "--na-values N/A" in r.output
    r = _cli(str(src), str(tmp_path / "o2"), "--na-values", "N/A")
    assert r.exit_code == 0, r.output
    x = TableDataset(tmp_path / "o2").__getitems__([0, 1, 2]).tensors[0]
    assert x[:, 1].isnan().tolist() == [False, True, False]


@pytest.mark.parametrize("coded", [False, True])
def test_non_utf8(tmp_path: Path, coded: bool) -> None:
    src = tmp_path / "t.csv"
    src.write_bytes(b"a,name\n1,ok\n2,caf\xe9\n")
    r = _cli(str(src), str(tmp_path / "o"), *(["--categorical", "name"] if coded else []))
    assert r.exit_code == 1 and "t.csv: row 2, column name: not UTF-8" in r.output


def test_resume_reuses_the_shards_of_a_failed_run(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a shard holds whole blocks: one file each here
    src.mkdir()
    for k in range(3):
        rows = "".join(f"{i},{i % 7}\n" for i in range(100 * k, 100 * k + 100))
        (src / f"{k}.csv").write_text("a,b\n" + rows + ("1\n" if k == 1 else ""))
    cfg = {"src": str(src), "out": str(tmp_path / "o"), "shard_rows": 100, "categorical": "b"}
    with pytest.raises(PrepError, match="--max-rejects"):  # every shard written, then refused
        pack_table(TableConfig(**cfg, max_rejects=0), show_progress=False)
    done = pack_table(TableConfig(**cfg, max_rejects=0.5, resume=True), show_progress=False)
    assert done.reused == done.shards == 3 and done.rejected == 1
    assert not (tmp_path / "o" / ".prep-run").exists()  # nor the parsed blocks kept there
    x_num, x_cat = TableDataset(tmp_path / "o").__getitems__(np.arange(300)).tensors
    assert x_num[:, 0].tolist() == list(range(300))
    assert TableDataset(tmp_path / "o").decode("b", x_cat[:, 0]) == [str(i % 7) for i in range(300)]


def test_empty_files(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.csv").write_bytes(b"")
    r = _cli(str(tmp_path / "src"), str(tmp_path / "o"))
    assert r.exit_code == 1 and "no readable table file" in r.output
    _write(_table(300), tmp_path / "src" / "b.csv")
    out = _pack(tmp_path / "src", tmp_path / "o2", max_rejects=0.1)
    assert json.loads((out / "rejects.jsonl").read_text())["reason"] == "empty"


def test_missing_target_column(tmp_path: Path) -> None:
    src = _write(_table(20), tmp_path / "t.csv")
    r = _cli(str(src), str(tmp_path / "o"), "--target", "Label")
    assert r.exit_code == 1 and "t.csv: --target column 'Label' is missing" in r.output


def test_bad_option_values_exit_2(tmp_path: Path) -> None:
    src = _write(_table(20), tmp_path / "t.csv")
    r = _cli(str(src), str(tmp_path / "o"), "--val-fraction", "1.5")
    assert r.exit_code == 2 and "--val-fraction 1.5 must be in [0, 1)" in r.output


def test_info_and_preview(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_text("city,when,n\nOslo,2024-01-02,1\n,,2\nLima,2024-03-04T05:06:07,3\n")
    out = _pack(src, tmp_path / "o", limit=3)
    info = CliRunner().invoke(app, ["info", str(out)])
    assert info.exit_code == 0, info.output
    assert "city                cat_0     cat     string  uint8            1  2" in info.output
    shown = CliRunner().invoke(app, ["preview", str(out)]).output.splitlines()
    assert shown[0].split() == ["split", "city", "when", "n"]
    assert shown[2].split() == ["train", "2"]  # missing city and time shown empty
    assert "2024-03-04T05:06:07" in shown[3]
    x_num = TableDataset(out).__getitems__([0, 1, 2]).tensors[0]
    assert x_num[:, 0].isnan().tolist() == [False, True, False]  # NaT as NaN


@pytest.mark.parametrize("in_memory", [False, True])
def test_empty_batch(tmp_path: Path, in_memory: bool) -> None:
    src = _write(_table(50), tmp_path / "t.csv")
    out = _pack(src, tmp_path / "o", target="label", missing_mask=True)
    ds = TableDataset(out, missing_mask=True, in_memory=in_memory, index=True)
    full = ds.__getitems__([0, 1]).tensors
    empty = ds.__getitems__([]).tensors
    assert len(empty) == len(full) == 5
    for e, f in zip(empty, full, strict=True):
        assert e.shape == (0, *f.shape[1:]) and e.dtype == f.dtype


def test_infinite_cells_warn_nothing_and_stay_out_of_the_statistics(tmp_path: Path) -> None:
    """A column with inf and -inf (their sum is NaN): no numpy warning, and the range and mean
    of its finite cells alone."""
    src = tmp_path / "inf.csv"
    src.write_text("x,y\n1.5,0\ninf,1\n-inf,0\n2.5,1\n4.0,0\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _pack(src, tmp_path / "out", target="y")
    col = read_manifest(out).fields["num_0"]
    assert (col["lo"], col["hi"], col["mean"]) == (1.5, 4.0, pytest.approx(8.0 / 3, rel=1e-12))
