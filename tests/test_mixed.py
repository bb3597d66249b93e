"""MixedDataset: proportions, the same samples for any worker and rank count, skip, wrap and
stop, fields refused or chosen, and batches that equal the sources' own reads."""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import prep
from loaders import (
    DocumentDataset,
    ImageShardDataset,
    MixedDataset,
    Normalize,
    SampleDataset,
    ShardSampler,
    TokenWindowDataset,
    make_loader,
)
from loaders.datasets.mixed import counts
from prep.fields import Array, Label, Text

WEIGHTS = [0.6, 0.3, 0.1]


def mix(packed: Path, fields: tuple[str, ...] = ("label", "index"), **kw: Any) -> MixedDataset:
    parts = [ImageShardDataset(packed, size=64, fields=fields) for _ in WEIGHTS]
    return MixedDataset(parts, weights=WEIGHTS, **kw)


def drawn(loader: Any) -> np.ndarray:
    """(source, index in it) of each sample of one pass, in order."""
    rows = [np.stack([b[-1].numpy(), b[-2].numpy()], 1) for b in loader]
    return np.concatenate(rows)


def test_counts_sum_to_the_length() -> None:
    w = np.array(WEIGHTS)
    assert counts(10, w).tolist() == [6, 3, 1]
    assert [int(counts(n, w).sum()) for n in (1, 7, 9999)] == [1, 7, 9999]


def test_proportions_within_three_sigma(packed: Path) -> None:
    ds = mix(packed, length=10_000)
    got = drawn(make_loader(ds, batch_size=500, shuffle=True, seed=1))
    assert len(got) == 10_000
    for start, n in ((0, 10_000), (0, 2_000), (5_000, 1_000)):  # an epoch, and stretches of it
        seen = np.bincount(got[start : start + n, 0], minlength=3)
        for k, w in enumerate(WEIGHTS):
            assert abs(seen[k] - n * w) <= 3 * math.sqrt(n * w * (1 - w)), (start, n, seen)


def test_batches_equal_the_sources_reads(packed: Path) -> None:
    ds = mix(packed, ("image", "label", "index"), length=50, seed=3)
    images, labels, index, source = ds.__getitems__(list(range(50))).tensors
    assert images.shape == (50, 3, 64, 64)
    assert images.is_contiguous(memory_format=torch.channels_last)  # as the sources give them
    which, local = ds.locate(range(50))
    assert source.tolist() == which.tolist() and index.tolist() == local.tolist()
    for j in (0, 17, 49):
        image, label, i = ds.datasets[int(which[j])][int(local[j])]
        assert torch.equal(images[j], image) and labels[j] == label and index[j] == i
    assert torch.equal(ds[17][0], images[17])


def test_same_samples_for_0_and_2_workers(packed: Path) -> None:
    ds = mix(packed, length=300, seed=5)
    ds.set_epoch(2)
    alone = drawn(make_loader(ds, batch_size=32, shuffle=True, seed=7))
    loader = make_loader(ds, 32, shuffle=True, seed=7, num_workers=2)
    assert np.array_equal(drawn(loader), alone)
    ds.set_epoch(3)  # reaches the persistent workers
    fresh = make_loader(pickle.loads(pickle.dumps(ds)), 32, shuffle=True, seed=7)
    fresh.sampler.set_epoch(1)  # the order of the loader's second pass
    assert np.array_equal(drawn(loader), drawn(fresh))


def test_same_samples_for_1_and_2_ranks(packed: Path) -> None:
    ds = mix(packed, length=300, seed=5)

    def rank(r: int, of: int) -> np.ndarray:
        sampler = ShardSampler([len(ds)], "random", seed=9, num_replicas=of, rank=r)
        return drawn(make_loader(ds, batch_size=25, sampler=sampler))

    one, two = rank(0, 1), [rank(r, 2) for r in (0, 1)]
    assert np.array_equal(np.stack(two, 1).reshape(-1, 2), one)  # rank r: positions r, r+2...


def test_skip_resumes_mid_epoch(packed: Path) -> None:
    ds = mix(packed, length=200)
    loader = make_loader(ds, batch_size=20, shuffle=True)
    ds.set_epoch(1)
    loader.sampler.set_epoch(1)
    whole = drawn(loader)
    loader.sampler.set_epoch(1)
    loader.sampler.skip(60)
    assert np.array_equal(drawn(loader), whole[60:])


def test_epochs_go_on_through_the_sources(packed: Path) -> None:
    ds = mix(packed, length=20)  # source 0 gives 12 of its 24 an epoch
    firsts = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        which, local = ds.locate(range(20))
        firsts.append(set(local[which == 0].tolist()))
        assert ds.datasets[0].epoch == epoch  # reaches the sources (their crops)
    assert len(firsts[0]) == len(firsts[1]) == 12 and not firsts[0] & firsts[1]


def test_wrap_starts_a_source_over(packed: Path) -> None:
    ds = mix(packed, length=100)  # source 0: 60 draws of 24 samples
    which, local = ds.locate(range(100))
    assert np.bincount(which).tolist() == [60, 30, 10]
    times = np.bincount(local[which == 0], minlength=24)
    assert set(times.tolist()) <= {2, 3} and times.sum() == 60  # every sample, a pass at a time


@pytest.mark.parametrize("length", [None, 30])
def test_stop_ends_the_epoch_where_a_source_runs_out(packed: Path, length: int | None) -> None:
    ds = mix(packed, length=length, exhausted="stop")
    assert len(ds) == (length or 40)  # source 0 (24 samples, 0.6) runs out at 40
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        which, local = ds.locate(range(len(ds)))
        for k in range(3):
            mine = local[which == k]
            assert len(set(mine.tolist())) == len(mine)  # no sample twice in an epoch
    with pytest.raises(IndexError):
        ds.locate([len(ds)])


def test_mismatched_fields_refused_unless_chosen(packed: Path) -> None:
    a = ImageShardDataset(packed, size=64, fields=("image", "label"))
    b = ImageShardDataset(packed, size=96, fields=("label", "orig_size"))
    with pytest.raises(ValueError, match=r"fields differ.*HINT.*fields=.*label"):
        MixedDataset([a, b], [0.5, 0.5])
    with pytest.raises(ValueError, match="has no field"):
        MixedDataset([a, b], [0.5, 0.5], fields=("image",))
    ds = MixedDataset([a, b], [0.5, 0.5], fields=("label",))
    labels, source = ds.__getitems__(list(range(8))).tensors
    assert labels.shape == source.shape == (8,)
    bad = MixedDataset([a, ImageShardDataset(packed, size=96)], [0.5, 0.5], length=40)
    with pytest.raises(ValueError, match=r"'image'.*HINT"):
        bad.__getitems__(list(range(40)))  # 64 px and 96 px images cannot stack


@pytest.mark.parametrize(
    "kw", [{"weights": [1, 2]}, {"weights": [1, -1, 1]}, {"exhausted": "x"}, {"length": 0}]
)
def test_bad_arguments(packed: Path, kw: dict[str, Any]) -> None:
    parts = [ImageShardDataset(packed, size=64, fields=("label",)) for _ in WEIGHTS]
    with pytest.raises(ValueError):
        MixedDataset(parts, **{"weights": WEIGHTS, **kw})


def test_samples_mix_as_dicts_padding_ragged_fields(tmp_path: Path) -> None:
    fields = {"labels": Array("int64", (None,)), "caption": Text(), "y": Label()}
    roots = []
    for n in (2, 5):  # the sources' longest ragged rows differ: padded to the longer

        def make(i: int, n: int = n) -> dict[str, Any]:
            return {"labels": np.arange(n, dtype=np.int64) + i, "caption": f"{n}:{i}", "y": i % 3}

        out = tmp_path / f"s{n}"
        prep.pack_samples(make, list(range(6)), out, fields, show_progress=False, jobs=1)
        roots.append(out)
    ds = MixedDataset([SampleDataset(r) for r in roots], [0.5, 0.5], length=12)
    batch = ds.__getitems__(list(range(12)))
    which, local = ds.locate(range(12))
    assert batch["mixture"].tolist() == which.tolist()
    assert batch["labels"].shape == (12, 5)
    for j in range(12):
        n = (2, 5)[which[j]]
        assert batch["caption"][j] == f"{n}:{local[j]}" and batch["labels_len"][j] == n
        assert batch["labels"][j, :n].tolist() == list(range(local[j], local[j] + n))
        assert batch["labels"][j, n:].eq(0).all()


def test_token_windows_and_documents(tmp_path: Path) -> None:
    from prep.kinds.text.config import TokenizeConfig
    from prep.kinds.text.tokenize import tokenize

    roots = []
    for n, word in ((6, b"alpha beta "), (9, b"gamma ")):
        src = tmp_path / f"src{n}"
        src.mkdir()
        for i in range(n):
            (src / f"d{i}.txt").write_bytes(word * (i + 1))
        cfg = TokenizeConfig(src=str(src), out=str(tmp_path / f"t{n}"), jobs=1, val_fraction=0.0)
        tokenize(cfg, show_progress=False)
        roots.append(tmp_path / f"t{n}")
    windows = [TokenWindowDataset(r, block_size=8) for r in roots]
    ds = MixedDataset(windows, [0.5, 0.5], length=30, seed=2)
    x, y, source = next(iter(make_loader(ds, batch_size=30)))
    assert torch.equal(x[:, 1:], y[:, :-1])  # shifted pairs, each from one source
    which, local = ds.locate(range(30))
    assert x.shape == (30, 8) and source.tolist() == which.tolist()
    for j in range(30):
        assert torch.equal(x[j], windows[which[j]][int(local[j])][0])
    docs = MixedDataset([DocumentDataset(r, split="train") for r in roots], length=15)
    items = docs.__getitems__(list(range(15)))
    which, local = docs.locate(range(15))
    for item, k, i in zip(items, which.tolist(), local.tolist(), strict=True):
        tokens, source = item
        assert torch.equal(tokens, docs.datasets[k][i]) and int(source) == k


def test_a_remote_source(raw_demo: Path, packed: Path, s3: Any, tmp_path: Path) -> None:
    from conftest import run_pack
    from s3server import BUCKET

    url = f"s3://{BUCKET}/mixed"
    run_pack(raw_demo / "images", url, sizes=[64], shard_size=8, staging=str(tmp_path / "st"))
    remote = ImageShardDataset(url, size=64, cache_dir=tmp_path / "cache")
    ds = MixedDataset([remote, ImageShardDataset(packed, size=64)], [0.5, 0.5], length=40)
    images, labels, source = next(iter(make_loader(ds, batch_size=40)))  # in the plan's order
    which, local = ds.locate(range(40))
    assert source.tolist() == which.tolist() and set(which.tolist()) == {0, 1}
    for j in range(40):
        image, label = ds.datasets[int(which[j])][int(local[j])]
        assert torch.equal(images[j], image) and labels[j] == label
    assert Normalize.from_dataset(remote).mean.shape == (3, 1, 1)  # a pack to a URL has stats
