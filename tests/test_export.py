"""prep export: Parquet with Hugging Face Features that `datasets` reads, WebDataset tars that
`webdataset` reads, and the round trip through `prep import hf` gives the same samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from prep.cli.main import app
from tests.test_append import by_source, run_pack, week1


def test_parquet_round_trip_through_import_hf(tmp_path: Path) -> None:
    src, packed, parquet = tmp_path / "photos", tmp_path / "ds", tmp_path / "parquet"
    week1(src)
    run_pack(src, packed, sizes=[16], shard_size=4, hashes=False)
    result = CliRunner().invoke(app, ["export", str(packed), str(parquet), "--to", "parquet"])
    assert result.exit_code == 0, result.output
    import datasets

    got = datasets.load_dataset("parquet", data_files=str(parquet / "*.parquet"), split="train")
    assert got.features["label"].names == ["cat", "dog"]
    assert type(got.features["image"]).__name__ == "Image"
    assert len(got) == 9 and got[0]["source"] == "cat/c0.png"
    back = tmp_path / "back"
    result = CliRunner().invoke(app, ["import", "hf", str(parquet), str(back), "--sizes", "16"])
    assert result.exit_code == 0, result.output
    from loaders import SampleDataset

    ds = SampleDataset(back)
    theirs = by_source(packed)
    classes = ds.store.manifest.fields["label"]["classes"]
    for i in range(len(ds)):
        s = ds[i]
        pixels, name = theirs[str(s["source_"])]
        np.testing.assert_array_equal(s["image"].numpy(), pixels)
        assert classes[int(s["label"])] == name
    assert len(ds) == len(theirs)


def test_webdataset_tars(tmp_path: Path) -> None:
    src, packed, tars = tmp_path / "photos", tmp_path / "ds", tmp_path / "wds"
    week1(src)
    run_pack(src, packed, sizes=[16], hashes=False)
    result = CliRunner().invoke(app, ["export", str(packed), str(tars), "--to", "webdataset"])
    assert result.exit_code == 0, result.output
    import webdataset as wds

    samples = list(wds.WebDataset(str(tars / "train-00000.tar"), shardshuffle=False).decode("rgb8"))
    assert len(samples) == 9
    assert samples[0]["image.png"].shape == (16, 16, 3) and samples[0]["label.cls"] == 0
