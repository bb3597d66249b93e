"""Train/val in one image dataset: prep pack --splits (sub-folders) and --val-fraction (a hash
of the path), ImageShardDataset(split=), and prep info's per-split lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from loaders import ImageShardDataset
from prep.cli.main import app
from prep.inspect.report import info
from prep.run.errors import PrepError


def _write(root: Path, rels: list[str]) -> None:
    """An 8x8 PNG per relative path, each a grey level of its own (its rank in `rels`)."""
    for i, rel in enumerate(rels):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (i * 7 % 256,) * 3).save(path)


def _tree(root: Path) -> None:
    _write(root, [f"train/{c}/{i}.png" for c in ("cat", "dog") for i in range(3)])
    _write(root, ["val/cat/9.png", "val/dog/8.png"])  # no "bird" in val: info says so
    _write(root, ["train/bird/0.png"])


def test_split_folders_read_one_split_each(tmp_path: Path, pack_to) -> None:
    _tree(tmp_path / "src")
    out = tmp_path / "ds"
    pack_to(tmp_path / "src", out, sizes=[8], splits="train,val", shard_size=2)
    val = ImageShardDataset(out, size=8, split="val", fields=("label", "index"))
    train = ImageShardDataset(out, size=8, split="train")
    both = ImageShardDataset(out, size=8)
    assert (len(train), len(val), len(both)) == (7, 2, 9)
    assert val.classes == ["bird", "cat", "dog"]  # one class map across splits
    assert [val.source(i) for i in range(2)] == ["val/cat/9.png", "val/dog/8.png"]
    labels, index = val.__getitems__([0, 1]).tensors
    assert labels.tolist() == [1, 2] and index.tolist() == [0, 1]
    assert sorted(train.source(i) or "" for i in range(7))[0] == "train/bird/0.png"
    shown = info(out)
    assert "split train: 7 samples, 3 of 3 classes" in shown
    assert "split val: 2 samples, 2 of 3 classes (none of: bird)" in shown
    with pytest.raises(ValueError, match="no 'test' split"):
        ImageShardDataset(out, size=8, split="test")


def test_class_only_in_val_names_it(tmp_path: Path, pack_to) -> None:
    src = tmp_path / "src"
    _write(src, ["train/cat/0.png", "val/cat/1.png", "val/owl/2.png"])
    with pytest.raises(PrepError, match=r"class 'owl' \(.*val/owl\) has val images but no train"):
        pack_to(src, tmp_path / "ds", sizes=[8], splits="train,val")


def test_missing_split_folder_is_one_line(tmp_path: Path) -> None:
    _write(tmp_path / "src", ["train/cat/0.png"])
    args = ["pack", str(tmp_path / "src"), str(tmp_path / "ds"), "--size", "8"]
    result = CliRunner().invoke(app, [*args, "--splits", "train,val"])
    assert result.exit_code != 0 and "val is not a folder" in result.output
    result = CliRunner().invoke(app, [*args, "--splits", "train", "--val-fraction", "0.2"])
    assert result.exit_code != 0 and "--val-fraction 0.2 with --splits" in result.output


def _val_sources(out: Path) -> set[str]:
    val = ImageShardDataset(out, size=8, split="val", fields=("label",))
    return {val.source(i) or "" for i in range(len(val))}


def test_val_fraction_is_a_hash_of_the_path(tmp_path: Path, pack_to) -> None:
    src = tmp_path / "src"
    _write(src, [f"{c}/{i:02d}.png" for c in ("a", "b") for i in range(10)])
    pack_to(src, tmp_path / "one", sizes=[8], val_fraction=0.3)
    first = _val_sources(tmp_path / "one")
    assert 1 <= len(first) <= 12  # 6 expected of 20
    # More files, in the same folders: no earlier file changes split.
    _write(src, [f"{c}/{i:02d}.png" for c in ("a", "b") for i in range(10, 15)])
    pack_to(src, tmp_path / "two", sizes=[8], val_fraction=0.3)
    second = _val_sources(tmp_path / "two")
    assert {s for s in second if int(s[2:4]) < 10} == first
    train = ImageShardDataset(tmp_path / "two", size=8, split="train", fields=("label",))
    assert len(train) + len(second) == 30
    stats = train.store.manifest.extra["stats"]["image"]
    assert stats["split"] == "train"  # the pixel statistics: of the train split alone
