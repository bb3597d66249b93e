"""`prep demo`'s sources for the importers (prep.demo.images): a Hugging Face Parquet folder,
WebDataset tars and a train/val tree, each imported as `make dataset` does, with the same bytes
for the same seed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loaders import ImageShardDataset, Normalize, SampleDataset
from loaders.format import read_manifest
from prep.cli.main import app
from prep.demo.images import make_demo


def run(*args: str) -> None:
    quiet = [] if args[0] == "verify" else ["-q", "--jobs", "1"]
    result = CliRunner().invoke(app, [*args, *quiet])
    assert result.exit_code == 0, result.output


def digest(root: Path) -> str:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    parts = [(p.relative_to(root).as_posix(), p.read_bytes()) for p in files]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tmp_path_factory.mktemp("demo") / "raw"
    make_demo(raw, count=8, seed=0, jobs=1, max_side=64, show_progress=False)
    return raw


def test_the_sources_exist_and_are_deterministic(raw: Path, tmp_path: Path) -> None:
    names = {p.relative_to(raw).as_posix() for p in raw.glob("*/*") if p.is_file()}
    assert {"hf/train-00000-of-00001.parquet", "hf/validation-00000-of-00001.parquet"} <= names
    assert {"wds/shard-000000.tar", "wds/shard-000001.tar"} <= names
    assert len(list((raw / "tree" / "train").glob("*/*.jpg"))) == 6
    assert len(list((raw / "tree" / "val").glob("*/*.jpg"))) == 2
    again = tmp_path / "again"
    make_demo(again, count=8, seed=0, jobs=1, max_side=64, show_progress=False)
    for source in ("hf", "wds", "tree"):
        assert digest(raw / source) == digest(again / source), source


def test_each_source_imports(raw: Path, tmp_path: Path) -> None:
    hf, wds, tree = tmp_path / "hf", tmp_path / "wds", tmp_path / "tree"
    run("import", "hf", str(raw / "hf"), str(hf), "--sizes", "32")
    manifest = read_manifest(hf)
    assert manifest.extra["splits"] == {"train": 6, "validation": 2}
    assert manifest.extra["stats"]["image"]["split"] == "train"
    train = SampleDataset(hf, split="train")
    batch = train.__getitems__([0, 1])
    assert batch["text"][0].startswith("a ") and batch["label"].tolist() == [0, 1]
    assert Normalize.from_dataset(train).mean.numel() == 3
    run("import", "webdataset", str(raw / "wds" / "shard-{000000..000001}.tar"), str(wds))
    ds = SampleDataset(wds, size=256, fields=("__key__", "cls", "txt", "json"))
    got = ds.__getitems__(list(range(len(ds))))
    assert got["__key__"] == [f"{i:05d}" for i in range(8)]
    assert got["cls"].tolist() == [i % 4 for i in range(8)]
    assert [j["id"] for j in got["json"]] == list(range(8))
    run("pack", str(raw / "tree"), str(tree), "--sizes", "32", "--splits", "train,val")
    assert len(ImageShardDataset(tree, size=32, split="val")) == 2
    for out in (hf, wds, tree):
        run("verify", str(out))
