"""The `index` field of every dataset: the dataset index asked for, int64, per item and per
batch, in shuffled make_loader batches the row of the batch's other outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_table import _pack, _table, _write
from test_tokenize import corpus, run
from test_volume_pack import pack_volumes

from loaders import DocumentDataset, PatchDataset, TableDataset, VolumeDataset, make_loader
from prep.demo.volumes import make_phantoms


def assert_index(t: torch.Tensor, want: Any) -> None:
    """`t` is int64 and holds the indices `want` (a 0-d tensor for one int)."""
    assert t.dtype == torch.int64 and t.shape == np.shape(want)
    assert t.tolist() == (want if np.ndim(want) == 0 else list(want))


def shuffled_indices(batches: list[torch.Tensor], n: int) -> list[int]:
    """The epoch's indices from its index batches: each once, not in order."""
    got = torch.cat([b.reshape(-1) for b in batches]).tolist()
    assert sorted(got) == list(range(n)) and got != list(range(n))
    return got


@pytest.fixture(scope="module")
def volumes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tmp_path_factory.mktemp("vol")
    make_phantoms(raw, count=3, seed=1, side=24, dicom=False)
    pack_volumes(raw / "images", raw / "packed", labels=str(raw / "labels"), window="-1000,400")
    return raw / "packed"


def test_volume_index(volumes: Path) -> None:
    ds = VolumeDataset(volumes, fields=("index", "image", "label"))
    plain = VolumeDataset(volumes)
    for v in (0, 2, -1):
        index, image, label = ds[v]
        assert_index(index, v % len(ds))
        assert torch.equal(image, plain[v][0]) and torch.equal(label, plain[v][1])
    with pytest.raises(ValueError, match="'index'"):  # listed among what it has
        VolumeDataset(volumes, fields=("mask",))
    batches = []
    for index, image in make_loader(VolumeDataset(volumes, fields=("index", "image")), 1, True):
        assert index.dtype == torch.int64 and index.shape == (1,)
        assert torch.equal(image[0], plain[int(index[0])][0])
        batches.append(index)
    assert sorted(torch.cat(batches).tolist()) == [0, 1, 2]


def test_patch_index_is_the_patch_not_the_volume(volumes: Path) -> None:
    ds = PatchDataset(volumes, (8, 8, 8), per_volume=4, seed=2, fields=("image", "index"))
    plain = PatchDataset(volumes, (8, 8, 8), per_volume=4, seed=2, fields=("image",))
    image, index = ds[7]
    assert_index(index, 7)  # volume 1's fourth patch
    assert torch.equal(image, plain[7][0])
    image, index = ds.__getitems__([5, -1, 0]).tensors
    assert_index(index, [5, 11, 0])
    assert torch.equal(image, plain.__getitems__([5, 11, 0]).tensors[0])
    batches = []
    for image, index in make_loader(ds, batch_size=5, shuffle=True, seed=3):
        assert torch.equal(image, plain.__getitems__(index.tolist()).tensors[0])
        batches.append(index)
    shuffled_indices(batches, len(ds))


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("tab")
    src = _write(_table(300), tmp / "t.parquet")
    return _pack(src, tmp / "out", target="label", shard_rows=70, missing_mask=True)


@pytest.mark.parametrize("in_memory", [False, True])
def test_table_index(table: Path, in_memory: bool) -> None:
    ds = TableDataset(table, missing_mask=True, in_memory=in_memory, index=True)
    plain = TableDataset(table, missing_mask=True)
    assert len(ds[0]) == len(plain[0]) + 1  # appended last, after the mask
    for i in (0, 71, -1):
        assert_index(ds[i][-1], i % len(ds))
    rows = [3, 299, 70, 69, 3]
    assert_index(ds.__getitems__(rows).tensors[-1], rows)
    ids = plain.numeric_columns.index("id")
    batches = []
    for *tensors, index in make_loader(ds, batch_size=32, shuffle=True, seed=1):
        want = plain.__getitems__(index.numpy()).tensors
        for got, exp in zip(tensors, want, strict=True):
            torch.testing.assert_close(got, exp, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(tensors[0][:, ids].long(), index)  # row i of the table has id i
        batches.append(index)
    shuffled_indices(batches, len(ds))


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("docs")
    run(corpus(tmp, n=12), tmp / "out", tokenizer="char", shard_mb=0.0005)
    return tmp / "out"


def test_document_index(documents: Path) -> None:
    ds = DocumentDataset(documents, split="train", index=True)
    plain = DocumentDataset(documents, split="train")
    assert isinstance(plain[0], torch.Tensor)  # without index=True: the tensor alone
    for i in (0, 5, -1):
        tokens, index = ds[i]
        assert_index(index, i % len(ds))
        assert torch.equal(tokens, plain[i])
    batches = []
    for tokens, index in make_loader(ds, batch_size=1, shuffle=True, seed=4):  # default collate
        assert index.dtype == torch.int64 and index.shape == (1,)
        assert torch.equal(tokens[0], plain[int(index[0])])
        batches.append(index)
    shuffled_indices(batches, len(ds))
    for batch in make_loader(ds, batch_size=5, shuffle=True, collate_fn=list):  # ragged
        for tokens, index in batch:
            assert torch.equal(tokens, plain[int(index)])
