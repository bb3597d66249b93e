"""prep import hf: a dataset the real `datasets` package saves (save_to_disk, Parquet) reads back
field for field as `datasets` reads it; splits and features in the manifest; an unsupported
feature is one line that names it."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image as PILImage
from typer.testing import CliRunner

from loaders import SampleDataset
from loaders.format import read_manifest
from prep import UsageError
from prep.cli.main import app
from prep.kinds.importers.config import HFConfig
from prep.kinds.importers.hf import import_hf

datasets = pytest.importorskip("datasets")

RNG = np.random.default_rng(0)
IMAGES = [(RNG.random((16, 16, 3)) * 255).astype(np.uint8) for _ in range(5)]


def png(i: int) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(IMAGES[i]).save(out, format="PNG")
    return out.getvalue()


def features() -> Any:
    d = datasets
    return d.Features(
        {
            "img": d.Image(),
            "y": d.ClassLabel(names=["cat", "dog", "emu"]),
            "f": d.Value("float32"),
            "i": d.Value("int64"),
            "ok": d.Value("bool"),
            "s": d.Value("string"),
            "b": d.Value("binary"),
            "seq": d.Sequence(d.Value("int32")),
            "fixed": d.Sequence(d.Value("float32"), length=3),
            "a2": d.Array2D(shape=(2, 3), dtype="float32"),
            "a3": d.Array3D(shape=(None, 2, 2), dtype="int16"),
            "obj": d.Sequence(
                {"bbox": d.Sequence(d.Value("float32"), length=4), "cat": d.Value("int64")}
            ),
            "st": {"u": d.Value("int8"), "v": d.Value("string")},
            "tags": d.Sequence(d.Value("string")),
        }
    )


def row(i: int) -> dict[str, Any]:
    n = i % 3  # 0..2 boxes, frames, tags: sample 0 has none
    return {
        "img": png(i),
        "y": i % 3,
        "f": i / 4,
        "i": 10**12 + i,
        "ok": bool(i % 2),
        "s": f"row {i} — é",
        "b": bytes([i, 0, 255]),
        "seq": list(range(n)),
        "fixed": [i, i + 1, i + 2],
        "a2": np.full((2, 3), i, np.float32),
        "a3": np.full((n, 2, 2), i, np.int16),
        "obj": {"bbox": [[i, i, i + 4, i + 5]] * n, "cat": [i] * n},
        "st": {"u": -i, "v": str(i)},
        "tags": ["t"] * n,
    }


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DatasetDict of 3 train rows and 2 test rows, saved to disk and to Parquet files."""
    root = tmp_path_factory.mktemp("hf")
    splits = {"train": [0, 1, 2], "test": [3, 4]}
    dd = datasets.DatasetDict(
        {
            name: datasets.Dataset.from_list([row(i) for i in rows], features=features())
            for name, rows in splits.items()
        }
    )
    dd.save_to_disk(str(root / "disk"))
    for name, ds in dd.items():
        ds.to_parquet(str(root / "pq" / "data" / f"{name}-00000-of-00001.parquet"), batch_size=2)
    return root


def expected(r: dict[str, Any]) -> dict[str, Any]:
    """What each field holds, from a row as `datasets` reads it (images decoded by PIL)."""
    return {
        "img": np.asarray(r["img"].convert("RGB")),
        **{k: r[k] for k in ("y", "i", "ok", "s", "b", "seq", "fixed", "a2", "a3")},
        "f": np.float32(r["f"]),
        "obj_bbox": r["obj"]["bbox"],
        "obj_cat": r["obj"]["cat"],
        "st_u": r["st"]["u"],
        "st_v": r["st"]["v"],
        "tags": r["tags"],
    }


def check_equal(want: dict[str, Any], got: dict[str, Any]) -> None:
    assert set(got) == set(want), set(got) ^ set(want)
    for k, v in want.items():
        g = got[k]
        if k == "img":
            assert np.array_equal(g.permute(1, 2, 0).numpy(), v), k
        elif isinstance(v, (str, bytes)) or k == "tags":
            assert g == v, k
        else:
            assert np.array_equal(
                np.asarray(g, dtype=np.float64), np.asarray(v, np.float64).reshape(np.shape(g))
            ), k


def imported(src: Path, out: Path, **kw: Any) -> SampleDataset:
    kw = {"sizes": [16], "jobs": 1, **kw}
    import_hf(HFConfig(src=str(src), out=str(out), **kw), show_progress=False)
    return SampleDataset(out, ragged="list")


@pytest.mark.parametrize("layout", ["disk", "pq"])
def test_every_feature_round_trips(saved: Path, tmp_path: Path, layout: str) -> None:
    ds = imported(saved / layout, tmp_path / "ds", shard_size=2)
    source = datasets.load_from_disk(str(saved / "disk"))
    rows = [(f"{s}/{k}", r) for s in ("train", "test") for k, r in enumerate(source[s])]
    assert len(ds) == len(rows) == 5
    batch = ds.__getitems__(list(range(5)))
    for j, (where, r) in enumerate(rows):  # each sample's source: its split and row there
        check_equal(expected(r) | {"source": where}, batch[j])
        assert ds.source(j) == where
    m = read_manifest(tmp_path / "ds")
    assert m.extra["splits"] == {"train": 3, "test": 2}
    assert [s.split for s in m.shards] == ["train", "train", "test"]  # no shard mixes splits
    assert m.extra["hf"]["features"] == json.loads(json.dumps(features().to_dict()))
    assert m.extra["hf"]["columns"]["obj_bbox"] == "obj.bbox"
    assert m.fields["y"]["classes"] == ["cat", "dog", "emu"] and m.classes == ["cat", "dog", "emu"]
    assert m.fields["a3"]["shape"] == [None, 2, 2] and m.fields["source"] == {"kind": "text"}


def test_parquet_without_metadata_and_image_paths_via_cli(tmp_path: Path) -> None:
    """A Parquet file no `datasets` wrote: features from its Arrow types; an image by path."""
    (tmp_path / "src" / "imgs").mkdir(parents=True)
    PILImage.fromarray(IMAGES[0]).save(tmp_path / "src" / "imgs" / "a.png")
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "image": pa.array(
                [{"bytes": None, "path": "imgs/a.png"}, {"bytes": png(1), "path": None}], image
            ),
            "index": [7, 8],  # a name SampleDataset gives meaning to: imported as index_
            "source": ["x", "y"],  # the import's own field (each row's place): source_
            "vec": pa.array([[1.5], [2.5, 3.5]], pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, tmp_path / "src" / "rows.parquet")
    res = CliRunner().invoke(
        app, ["import", "hf", str(tmp_path / "src"), str(tmp_path / "ds"), "--size", "16", "-q"]
    )
    assert res.exit_code == 0, res.output
    b = SampleDataset(tmp_path / "ds", ragged="list").__getitems__([0, 1])
    assert np.array_equal(b["image"][0].permute(1, 2, 0).numpy(), IMAGES[0])
    assert np.array_equal(b["image"][1].permute(1, 2, 0).numpy(), IMAGES[1])
    assert b["index_"].tolist() == [7, 8] and [v.tolist() for v in b["vec"]] == [[1.5], [2.5, 3.5]]
    assert b["source_"] == ["x", "y"] and b["source"] == ["0", "1"]  # no split: the row
    assert "splits" not in read_manifest(tmp_path / "ds").extra  # one unnamed split


def test_unsupported_feature_is_one_line(tmp_path: Path) -> None:
    ds = datasets.Dataset.from_dict({"a": [{"bytes": b"RIFF", "path": None}], "n": [1]})
    ds.cast_column("a", datasets.Audio(decode=False)).save_to_disk(str(tmp_path / "src"))
    res = CliRunner().invoke(app, ["import", "hf", str(tmp_path / "src"), str(tmp_path / "ds")])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "column a: feature Audio" in lines[0], res.output
    assert not (tmp_path / "ds").exists()
    res = CliRunner().invoke(
        app, ["import", "hf", str(tmp_path / "src"), str(tmp_path / "ds"), "--columns", "n"]
    )
    assert res.exit_code == 0, res.output  # the column left out


def test_splits_and_columns_chosen(saved: Path, tmp_path: Path) -> None:
    ds = imported(saved / "disk", tmp_path / "ds", splits="test", columns="y,obj")
    assert sorted(ds.declared) == ["obj_bbox", "obj_cat", "source", "y"] and len(ds) == 2
    assert [ds.source(i) for i in range(2)] == ["test/0", "test/1"]
    assert read_manifest(tmp_path / "ds").extra["splits"] == {"test": 2}
    with pytest.raises(UsageError, match="no split 'val'; it has train, test"):
        imported(saved / "disk", tmp_path / "ds2", splits="val")
    with pytest.raises(UsageError, match="no column 'nope'; it has img, y"):
        imported(saved / "pq", tmp_path / "ds2", columns="y,nope")


def test_missing_label_is_kept_as_minus_one(tmp_path: Path) -> None:
    """ClassLabel -1 (no label, as in test splits): every row kept, -1 read back as `datasets`
    reads it (an int64 Scalar); a split without any label no longer fails the import."""
    f = datasets.Features(
        {"y": datasets.ClassLabel(names=["a", "b"]), "n": datasets.Value("int32")}
    )
    splits = {"train": [0, 1, 1], "test": [-1, -1, -1]}
    datasets.DatasetDict(
        {
            s: datasets.Dataset.from_dict({"y": y, "n": [1, 2, 3]}, features=f)
            for s, y in splits.items()
        }
    ).save_to_disk(str(tmp_path / "src"))
    summary = import_hf(HFConfig(src=str(tmp_path / "src"), out=str(tmp_path / "ds")), False)
    assert (summary.packed, summary.rejected) == (6, 0)
    ds = SampleDataset(tmp_path / "ds")
    y = ds.__getitems__(list(range(6)))["y"]
    assert y.dtype == torch.int64 and y.tolist() == [0, 1, 1, -1, -1, -1]
    names = read_manifest(tmp_path / "ds").extra["hf"]["features"]["y"]["names"]
    assert names == ["a", "b"]


def test_the_datasets_cache_folder(tmp_path: Path) -> None:
    """What load_dataset leaves in its cache (json-train.arrow...): a split a file."""
    for split, text in (("train", "a"), ("validation", "b")):
        (tmp_path / f"{split}.jsonl").write_text(f'{{"t": "{text}", "n": 1}}\n' * 2)
    files = {s: str(tmp_path / f"{s}.jsonl") for s in ("train", "validation")}
    datasets.load_dataset("json", data_files=files, cache_dir=str(tmp_path / "cache"))
    folder = next((tmp_path / "cache").rglob("json-train.arrow")).parent
    ds = imported(folder, tmp_path / "ds")
    assert ds.__getitems__([0, 1, 2, 3])["t"] == ["a", "a", "b", "b"]
    m = read_manifest(tmp_path / "ds")
    assert m.extra["splits"] == {"train": 2, "validation": 2} and m.extra["hf"]["layout"] == "cache"


@pytest.mark.parametrize("layout", ["disk", "pq"])
def test_the_datasets_package_is_not_needed(
    saved: Path, tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prep reads the files with pyarrow: the import runs with `datasets` unimportable."""
    for name in [m for m in sys.modules if m == "datasets" or m.startswith("datasets.")]:
        monkeypatch.setitem(sys.modules, name, None)  # `import datasets...` raises ImportError
    with pytest.raises(ImportError):
        import datasets as _  # noqa: F401
    ds = imported(saved / layout, tmp_path / "ds", backend="threads")
    assert len(ds) == 5 and ds.__getitems__([4])["s"] == ["row 4 — é"]
