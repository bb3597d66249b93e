"""prep.run.shardwriter.ShardFiles: a shard's arrays written to temp names and published
together (npy or h5), or aborted leaving no file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loaders.format import sha256_file
from prep.run.shardwriter import ShardFiles, writing


def _write(staging: Path, fail: bool = False, h5: bool = False) -> ShardFiles:
    files = ShardFiles(staging, "train-00002", h5=h5)
    with writing([files]):
        image = files.array("image", "uint8", (2, 2))
        boxes = files.ragged("boxes", "float32")
        tokens = files.ragged("tokens", "uint16")
        for n in range(3):  # an empty ragged sample (n = 0) is one too
            image.append(np.full((2, 2), n, np.uint8))
            boxes.append(np.ones((n, 4), np.float32))
        tokens.extend(np.arange(5, dtype=np.uint16), np.array([2, 0, 3]))
        if fail:
            raise KeyboardInterrupt
    return files


def _read(path: Path, key: str | None) -> np.ndarray:
    if key is None:
        return np.load(path)
    import h5py

    with h5py.File(path, "r") as f:
        return np.asarray(f[key])


@pytest.mark.parametrize("h5", [False, True])
def test_round_trip(tmp_path: Path, h5: bool) -> None:
    shard = _write(tmp_path, h5=h5).publish(3, "train")
    expected = {"tokens-train-00002.npy", "tokens-offsets-train-00002.npy"}
    assert expected <= set(shard.files) or set(shard.files) == {"shard-train-00002.h5"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(shard.files)  # no temp left
    for name, info in shard.files.items():
        assert (info.bytes, info.sha256) == (
            (tmp_path / name).stat().st_size,
            sha256_file(tmp_path / name),
        )
    refs = shard.refs()
    arrays = {n: _read(tmp_path / r.file, r.key) for n, r in refs.items()}
    assert {n: len(a) for n, a in arrays.items()} == {n: r.length for n, r in refs.items()}
    assert arrays["image"][2].tolist() == [[2, 2], [2, 2]]
    off = arrays["boxes.offsets"]
    assert off.tolist() == [0, 0, 4, 12] and arrays["boxes"][off[2] : off[3]].shape == (8,)
    assert arrays["tokens.offsets"].tolist() == [0, 2, 2, 5]
    assert shard.count == 3 and shard.split == "train"


def test_abort_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        _write(tmp_path, fail=True)
    assert list(tmp_path.iterdir()) == []


def test_misuse_is_refused(tmp_path: Path) -> None:
    files = ShardFiles(tmp_path, "00000")
    with pytest.raises(KeyboardInterrupt), writing([files]):
        files.ragged("boxes", "float32")
        with pytest.raises(ValueError, match="opened twice"):
            files.array("boxes.offsets", "int64")
        with pytest.raises(TypeError, match="ragged"):
            files.extend({"boxes": np.zeros(3, np.float32)})
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
