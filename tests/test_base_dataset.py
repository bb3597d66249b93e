"""ShardedDataset, the one base of every dataset class: each kind opens a folder or a URL (the
remote arguments), reads its split's shards, pickles small, and shares its epoch."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_table import _pack, _table, _write
from test_tokenize import corpus, run
from test_volume_pack import pack_volumes

from loaders import (
    DocumentDataset,
    ImageShardDataset,
    PatchDataset,
    SampleDataset,
    TableDataset,
    TokenWindowDataset,
    VolumeDataset,
    make_loader,
)
from loaders.datasets.base import ShardedDataset
from prep.demo.volumes import make_phantoms

Opener = Callable[..., Any]  # (root, **remote) -> a dataset


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small pack of each kind this file reads, in several shards (two splits for text and
    tables)."""
    tmp = tmp_path_factory.mktemp("kinds")
    make_phantoms(tmp / "vol", count=3, seed=1, side=24, dicom=False)
    pack_volumes(
        tmp / "vol" / "images", tmp / "volumes", labels=str(tmp / "vol" / "labels"), shard_size=2
    )
    table = _write(_table(300), tmp / "t.parquet")
    _pack(table, tmp / "table", target="label", shard_rows=70, val_fraction=0.2)
    run(corpus(tmp, n=12), tmp / "tokens", tokenizer="char", shard_mb=0.0005, val_fraction=0.25)
    return {k: tmp / k for k in ("volumes", "table", "tokens")}


OPENERS: dict[str, tuple[str, Opener]] = {
    "volumes": ("volumes", lambda r, **kw: VolumeDataset(r, **kw)),
    "patches": ("volumes", lambda r, **kw: PatchDataset(r, (8, 8, 8), per_volume=2, **kw)),
    "table train": ("table", lambda r, **kw: TableDataset(r, **kw)),
    "table val": ("table", lambda r, **kw: TableDataset(r, "val", index=True, **kw)),
    "windows": ("tokens", lambda r, **kw: TokenWindowDataset(r, block_size=8, **kw)),
    "documents": ("tokens", lambda r, **kw: DocumentDataset(r, "train", **kw)),
}


def same_items(a: Any, b: Any) -> None:
    assert len(a) == len(b) > 0
    for i in range(len(a)):
        x, y = a[i], b[i]
        for s, t in zip(*((v,) if torch.is_tensor(v) else v for v in (x, y)), strict=True):
            torch.testing.assert_close(s, t, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", OPENERS)
def test_every_kind_opens_a_file_url_and_reads_as_the_folder(
    name: str, packs: dict[str, Path], tmp_path: Path
) -> None:
    kind, open_ = OPENERS[name]
    folder = open_(packs[kind])
    url = open_(f"file://{packs[kind]}", cache_dir=tmp_path / "cache", cache_limit="1GB")
    assert isinstance(url, ShardedDataset) and "file://" in repr(url)
    same_items(url, folder)
    assert any(p.is_file() for p in (tmp_path / "cache").rglob("*"))  # read from the cache
    assert url.shard_sizes == folder.shard_sizes and sum(url.shard_sizes) == len(url)


@pytest.mark.parametrize("name", OPENERS)
def test_a_folder_refuses_the_remote_arguments(
    name: str, packs: dict[str, Path], tmp_path: Path
) -> None:
    kind, open_ = OPENERS[name]
    with pytest.raises(ValueError, match="for a URL only"):
        open_(packs[kind], cache_dir=tmp_path)


@pytest.mark.parametrize("name", OPENERS)
def test_pickles_small_and_reads_the_same(name: str, packs: dict[str, Path]) -> None:
    kind, open_ = OPENERS[name]
    ds = open_(packs[kind])
    ds[0]  # maps a shard and computes what the manifest gives: none of it is pickled
    data = pickle.dumps(ds)
    assert len(data) < 2048, len(data)
    same_items(pickle.loads(data), ds)


def test_every_dataset_class_is_one() -> None:
    classes = [ImageShardDataset, SampleDataset, TableDataset, VolumeDataset, PatchDataset]
    assert all(issubclass(c, ShardedDataset) for c in [*classes, TokenWindowDataset])
    assert issubclass(DocumentDataset, ShardedDataset)


@pytest.mark.parametrize("kind", ["table", "tokens"])
def test_a_split_reads_its_own_shards(kind: str, packs: dict[str, Path]) -> None:
    open_: Opener = TableDataset if kind == "table" else DocumentDataset
    train, val = open_(packs[kind], "train"), open_(packs[kind], "val")
    shards = train.store.manifest.shards
    mine, theirs = train._shards.tolist(), val._shards.tolist()  # manifest indices, an array
    assert mine and theirs and set(mine).isdisjoint(theirs)
    assert sorted(mine + theirs) == list(range(len(shards)))
    assert train.shard_sizes == [shards[i].count for i in mine]
    assert len(train) + len(val) == sum(s.count for s in shards)
    last = val._find(val._checked([len(val) - 1]))
    assert (int(last[0][0]), int(last[1][0])) == (
        val._shards[-1],
        shards[val._shards[-1]].count - 1,
    )


@pytest.mark.parametrize("stride", [3, 8, 11])
def test_windows_per_shard_count_each_window_once(stride: int, packs: dict[str, Path]) -> None:
    ds = TokenWindowDataset(packs["tokens"], block_size=8, stride=stride)
    sizes = ds.shard_sizes
    assert len(sizes) == len(ds._shards) > 1 and sum(sizes) == len(ds) and min(sizes) >= 0
    starts = np.arange(len(ds)) * stride  # window i starts at token i * stride: in its shard
    counts = np.bincount(
        np.searchsorted(ds._token_starts, starts, "right") - 1, minlength=len(sizes)
    )
    assert counts.tolist() == sizes
    loader = make_loader(TokenWindowDataset(packs["tokens"], 8, stride=stride, index=True), 4)
    loader = make_loader(loader.dataset, 4, order="quasi_random", window=2, seed=1)
    seen = torch.cat([index for _, _, index in loader]).tolist()
    assert sorted(seen) == list(range(len(ds))) and seen != sorted(seen)


def test_the_epoch_is_shared_by_every_kind(packs: dict[str, Path]) -> None:
    ds = PatchDataset(packs["volumes"], (8, 8, 8), per_volume=2, seed=3)
    first = [ds.start(i).tolist() for i in range(len(ds))]
    ds.set_epoch(4)
    assert ds.epoch == 4 and ds._now.is_shared()  # reaches persistent workers
    assert [ds.start(i).tolist() for i in range(len(ds))] != first
    with pytest.raises(ValueError, match="non-negative"):
        ds.set_epoch(-1)
