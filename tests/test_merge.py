"""prep merge: two datasets of the same fields become one without decoding (shards linked),
class maps unified with the moved labels remapped, sources prefixed; refusals in one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loaders import ImageShardDataset
from loaders.format import read_manifest
from prep import PrepError
from prep.cli.main import app
from prep.kinds.grow.merge import merge
from tests.test_append import photo, run_pack


def samples(root: Path) -> dict[str, tuple[np.ndarray, str]]:
    """source -> (pixels, class name) of every sample."""
    ds = ImageShardDataset(root, size=16, fields=("image", "label", "index"))
    classes = ds.store.manifest.classes or []
    out = {}
    for i in range(len(ds)):
        image, label, index = ds[i]
        out[str(ds.source(int(index)))] = (image.numpy(), classes[int(label)])
    return out


@pytest.fixture
def teams(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Team a's cats and dogs, team b's ants and dogs, each packed alone; all of them in one
    folder (a/..., b/...) for a full pack to compare with."""
    every = tmp_path / "every"
    for team, names in (
        ("a", ["cat/1.png", "cat/2.png", "dog/3.png"]),
        ("b", ["ant/4.png", "dog/5.png"]),
    ):
        for name in names:
            seed = int(name[-5])
            photo(tmp_path / "src" / team / name, seed)
            photo(every / name.replace("/", f"/{team}-"), seed)
        run_pack(tmp_path / "src" / team, tmp_path / team, sizes=[16], shard_size=2)
    run_pack(every, tmp_path / "full", sizes=[16], shard_size=2)
    return tmp_path / "a", tmp_path / "b", tmp_path / "full"


def test_merge_links_shards_and_remaps_labels(
    teams: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    a, b, full = teams
    out = tmp_path / "merged"
    summary = merge([a, b], out)
    m = read_manifest(out)
    assert m.classes == ["cat", "dog", "ant"]  # a's ids kept, b's ant moved from 0 to 2
    assert m.num_samples == 5 == summary.samples
    got = samples(out)
    want = {f"a/{k}": v for k, v in samples(a).items()} | {
        f"b/{k}": v for k, v in samples(b).items()
    }
    assert sorted(got) == sorted(want)
    for source, (pixels, name) in want.items():
        np.testing.assert_array_equal(got[source][0], pixels)
        assert got[source][1] == name
    # pixels are never decoded or copied: the image files are a's and b's own
    a_image = read_manifest(a).shards[0].arrays["image_16"].file
    out_image = m.shards[0].arrays["image_16"].file
    assert os.stat(a / a_image).st_ino == os.stat(out / out_image).st_ino
    assert m.extra["stats"] == read_manifest(full).extra["stats"]  # from the exact sums
    assert CliRunner().invoke(app, ["verify", str(out)]).exit_code == 0


def test_merge_refuses_itself_and_other_fields(
    teams: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    a, _, _ = teams
    with pytest.raises(PrepError, match="with itself"):
        merge([a, a], tmp_path / "m1")
    copy = tmp_path / "copy" / "a2"
    shutil.copytree(a, copy)
    with pytest.raises(PrepError, match="with itself"):
        merge([a, copy], tmp_path / "m2")  # the same manifest bytes: the same dataset
    other = tmp_path / "c"
    run_pack(tmp_path / "src" / "b", other, sizes=[32])
    result = CliRunner().invoke(app, ["merge", str(a), str(other), str(tmp_path / "m3")])
    assert result.exit_code == 1 and "field image differs" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "m3").exists() and not (tmp_path / "m3.partial").exists()
