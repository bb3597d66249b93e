"""prep table as a newcomer meets it (issues 23 and 24): class ids for a text target, files read
wrongly said so, several SRC paths, compressed files, other delimiters."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from loaders import TableDataset, make_loader
from loaders.format import read_manifest
from prep.cli.main import app

SPECIES = ("setosa", "versicolor", "virginica")


def _iris(path: Path, n: int = 60, missing: tuple[int, ...] = ()) -> Path:
    """An iris-like CSV: four measurements and a species name (row i is data row i + 1)."""
    rng = np.random.default_rng(0)
    lines = ["sepal_length,sepal_width,petal_length,petal_width,species"]
    for i in range(n):
        kind = i % 3
        x = rng.normal(4 + kind, 0.3, 4).round(1)
        name = "" if i + 1 in missing else SPECIES[kind]
        lines.append(",".join(map(str, x)) + f",{name}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["table", *args, "-j", "1", "-q"])


def _rejects(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]


def test_text_target_is_a_class_id(tmp_path: Path) -> None:
    src = _iris(tmp_path / "iris.csv", missing=(5,))
    out = tmp_path / "o"
    r = _cli(str(src), str(out), "--target", "species", "--max-rejects", "0.1")
    assert r.exit_code == 0, r.output
    ds = TableDataset(out)
    assert ds.classes == list(SPECIES) and ds.num_classes == 3
    x_num, _, y = ds.__getitems__(np.arange(len(ds))).tensors
    assert len(ds) == 59 and sorted(set(y.tolist())) == [0, 1, 2]
    assert ds.decode("species", y[:3]) == ["setosa", "versicolor", "virginica"]
    logits = torch.nn.Linear(4, ds.num_classes)(x_num)
    assert torch.isfinite(F.cross_entropy(logits, y))  # was: "Target 4 is out of bounds"
    for _x, _, y in make_loader(ds, batch_size=16):
        F.cross_entropy(torch.zeros(len(y), 3), y)
    from prep.inspect.report import info

    assert "classes (3), ids 0..2: setosa, versicolor, virginica" in info(out)
    (reject,) = _rejects(out)  # the row with no species: a reject, not code 0
    assert reject["reason"] == "target" and reject["row"] == 5
    assert reject["message"].startswith("row 5: ")


def test_categorical_target_and_a_class_only_val_holds(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_text("x,grade\n" + "".join(f"{i},{i % 4 + 1}\n" for i in range(200)))
    out = tmp_path / "o"
    args = ("--target", "grade", "--categorical", "grade", "--val-fraction", "0.3")
    assert _cli(str(src), str(out), *args).exit_code == 0
    train, val = TableDataset(out), TableDataset(out, split="val")
    assert train.classes == ["1", "2", "3", "4"] and train.num_classes == 4
    ys = [d.__getitems__(np.arange(len(d))).tensors[2] for d in (train, val)]
    assert all(int(y.min()) >= 0 and int(y.max()) <= 3 for y in ys)
    assert read_manifest(out).arrays["target"].dtype == "uint8"


def test_every_row_with_the_wrong_field_count_is_said(tmp_path: Path) -> None:
    src = tmp_path / "breast_cancer.csv"  # as sklearn ships it: a count line, then the rows
    rows = [",".join(["1.5"] * 30 + ["0"]) for _ in range(20)]
    src.write_text("569,30,malignant,benign\n" + "\n".join(rows) + "\n")
    r = _cli(str(src), str(tmp_path / "o"))
    assert r.exit_code == 1
    assert "breast_cancer.csv: every row has 31 fields, the header 4" in r.output
    assert "header only" not in r.output and "Traceback" not in r.output


def test_a_row_with_the_wrong_field_count_names_its_row(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    body = [f"{i},{i}" for i in range(1, 201)]
    body[149] = "150,150,oops"  # data row 150
    src.write_text("a,b\n" + "\n".join(body) + "\n")
    out = tmp_path / "o"
    assert _cli(str(src), str(out)).exit_code == 0
    (reject,) = _rejects(out)
    assert reject["reason"] == "fields" and reject["row"] == 150
    assert reject["message"].startswith("row 150: the row has 3 fields, the header 2")


def test_several_src_paths_as_a_shell_expands_a_glob(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    for k in range(3):
        (tmp_path / "data" / f"part{k}.csv").write_text(f"a,b\n{k},1\n{k},2\n")
    paths = sorted(str(p) for p in (tmp_path / "data").glob("*.csv"))
    out = tmp_path / "o"
    r = _cli(*paths, str(out))
    assert r.exit_code == 0, r.output
    x_num = TableDataset(out).__getitems__(np.arange(6)).tensors[0]
    assert x_num[:, 0].tolist() == [0, 0, 1, 1, 2, 2]
    assert read_manifest(out).config["src"] == paths
    one = _cli(paths[0], str(tmp_path / "one"))  # one SRC is still saved as a string
    assert one.exit_code == 0 and read_manifest(tmp_path / "one").config["src"] == paths[0]


def test_compressed_tables(tmp_path: Path) -> None:
    text = "a\tb\n" + "".join(f"{i}\t{i * 2}\n" for i in range(50))
    with gzip.open(tmp_path / "t.tsv.gz", "wt") as f:
        f.write(text)
    with gzip.open(tmp_path / "j.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps({"a": i, "b": 2 * i}) + "\n" for i in range(50)))
    for name in ("t.tsv.gz", "j.jsonl.gz"):
        out = tmp_path / f"o-{name}"
        r = _cli(str(tmp_path / name), str(out))
        assert r.exit_code == 0, r.output
        x_num = TableDataset(out).__getitems__(np.arange(50)).tensors[0]
        assert x_num[:, 1].tolist() == [2.0 * i for i in range(50)]


def test_delimiter_option_and_the_single_column_warning(tmp_path: Path) -> None:
    src = tmp_path / "t.txt.csv"
    src.write_text("a b c\n" + "".join(f"{i} {i + 1} {i + 2}\n" for i in range(20)))
    r = _cli(str(src), str(tmp_path / "one"))
    assert r.exit_code == 0
    assert "one column, named 'a b c'" in r.output and "--delimiter space" in r.output
    r = _cli(str(src), str(tmp_path / "three"), "--delimiter", "space")
    assert r.exit_code == 0 and "warning" not in r.output
    assert TableDataset(tmp_path / "three").numeric_columns == ["a", "b", "c"]
    semi = tmp_path / "s.csv"
    semi.write_text("a;b\n1;2\n3;4\n")
    r = _cli(str(semi), str(tmp_path / "semi"))
    assert "--delimiter ';'" in r.output
    bad = _cli(str(semi), str(tmp_path / "bad"), "--delimiter", ";;")
    assert bad.exit_code == 2 and "--delimiter" in bad.output


def test_reject_rows_are_the_files_across_blocks(tmp_path: Path, monkeypatch: Any) -> None:
    import functools

    import prep.kinds.table.scan as scan
    from prep.sources.table import blocks

    monkeypatch.setattr(scan, "blocks", functools.partial(blocks, block_bytes=64))
    src = tmp_path / "t.csv"
    body = [f"{i},{i % 3}" for i in range(1, 201)]
    body[149] = "150,0,extra"  # data row 150, many blocks in
    body[179] = ","  # data row 180: no target
    src.write_text("a,y\n" + "\n".join(body) + "\n")
    for name, extra in (("all", ()), ("limit", ("--limit", "190"))):
        out = tmp_path / name
        args = ("--target", "y", "--categorical", "y", "--max-rejects", "0.05", *extra)
        r = _cli(str(src), str(out), *args)
        assert r.exit_code == 0, r.output
        found = [(x["reason"], x["row"]) for x in _rejects(out)]
        assert found == [("fields", 150), ("target", 180)]
    header_only = tmp_path / "h.csv"
    header_only.write_text("a,y\n")
    r = _cli(str(header_only), str(tmp_path / "h"))
    assert r.exit_code == 1 and "the files hold a header only" in r.output
