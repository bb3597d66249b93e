"""Training on many processes: samplers, make_loader(distributed=True) under torch.distributed
(gloo, two real processes on 127.0.0.1), quasi-random order, in-memory datasets."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import socket
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from loaders import ImageShardDataset, make_loader
from loaders.read.samplers import ORDERS, ShardSampler, epoch_order, rank_share

SIZES = [8, 8, 8, 5]  # 29 samples in 4 shards


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_each_epoch_is_a_permutation_fixed_by_seed_and_epoch(order: str) -> None:
    a = epoch_order(SIZES, order, seed=1, epoch=0, window=2)
    assert sorted(a.tolist()) == list(range(29))
    assert np.array_equal(a, epoch_order(SIZES, order, seed=1, epoch=0, window=2))
    if order != "sequential":
        assert not np.array_equal(a, epoch_order(SIZES, order, seed=1, epoch=1, window=2))
        assert not np.array_equal(a, epoch_order(SIZES, order, seed=2, epoch=0, window=2))


@pytest.mark.parametrize("window", [1, 2, 3])
def test_quasi_random_reads_a_window_of_shards_at_a_time(window: int) -> None:
    starts = np.cumsum([0, *SIZES])
    shard_of = np.searchsorted(starts, epoch_order(SIZES, "quasi_random", 5, 0, window), "right")
    seen: list[set[int]] = []  # the shards of each window, in reading order
    for s in shard_of.tolist():
        if not seen or (s not in seen[-1] and len(seen[-1]) == window):
            seen.append(set())
        seen[-1].add(s)
    assert sum(len(w) for w in seen) == len(SIZES)  # each shard read in one window only
    assert all(len(w) == window for w in seen[:-1])


@pytest.mark.parametrize("n", [0, 1, 23, 24])
@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize("drop_last", [False, True])
def test_rank_shares_equal_and_disjoint(n: int, world: int, drop_last: bool) -> None:
    order = np.random.default_rng(n).permutation(n)
    shares = [rank_share(order, r, world, drop_last).tolist() for r in range(world)]
    assert len({len(s) for s in shares}) == 1
    flat = [i for s in shares for i in s]
    if drop_last:  # disjoint; the remainder of the epoch is left out
        assert len(set(flat)) == len(flat) == n - n % world
    else:  # cover; the padding repeats the epoch's first samples
        padded = np.resize(order, -(-n // world) * world) if n else order
        assert set(flat) == set(range(n)) and sorted(flat) == sorted(padded.tolist())


def test_sampler_advances_its_epoch_and_set_epoch_sets_it() -> None:
    alone = ShardSampler(SIZES, "quasi_random", seed=3, window=2)
    first, second = list(alone), list(alone)  # one process: each pass is the next epoch
    assert first != second and len(first) == len(second) == len(alone) == 29
    alone.set_epoch(0)
    assert list(alone) == first
    # Several ranks: only set_epoch changes the epoch, so an extra pass on one rank (a peek)
    # cannot make its share overlap the others'.
    s = ShardSampler(SIZES, "quasi_random", seed=3, window=2, num_replicas=2, rank=1)
    peek, again = list(s), list(s)
    assert peek == again and len(peek) == len(s) == 15
    s.set_epoch(1)
    assert list(s) != peek
    assert list(ShardSampler(SIZES, "quasi_random", seed=3, window=2, num_replicas=2, rank=1)) == (
        peek
    )


@pytest.mark.parametrize(
    ("order", "world"), [("random", 1), ("quasi_random", 1), ("quasi_random", 2)]
)
def test_skip_resumes_an_epoch_where_a_run_stopped(order: str, world: int) -> None:
    def sampler() -> tuple[ShardSampler, list[tuple[int, int]]]:
        s = ShardSampler(SIZES, order, seed=5, window=2, num_replicas=world, rank=world - 1)
        said: list[tuple[int, int]] = []
        s.on_window = lambda epoch, k: said.append((epoch, k))
        s.set_epoch(3)
        return s, said

    whole, said_whole = sampler()
    batches = [b.tolist() for b in whole.batches(4, False)]
    resumed, said = sampler()
    resumed.skip(2 * 4)  # two batches trained on before the run stopped
    assert len(resumed) == len(whole) - 8
    assert [b.tolist() for b in resumed.batches(4, False)] == batches[2:]
    if order == "quasi_random":  # every window announced, the skipped ones at the first batch
        assert said == said_whole
    again, _ = sampler()
    again.skip(5)
    assert list(again) == [i for b in batches for i in b][5:]  # iterating: the same share
    if world == 1:  # the pass after a resumed one is the next epoch, whole
        assert list(again) == list(ShardSampler(SIZES, order, seed=5, window=2).indices(4))
    with pytest.raises(ValueError, match="0 or more"):
        again.skip(-1)


def test_a_resumed_loader_gives_the_rest_of_the_epoch(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("image", "index"))
    whole = [(x.clone(), i.tolist()) for x, i in make_loader(ds, batch_size=5, shuffle=True)]
    loader = make_loader(ds, batch_size=5, shuffle=True)
    loader.sampler.skip(3 * 5)  # type: ignore[attr-defined]
    rest = list(loader)
    assert len(rest) == len(whole) - 3
    for (x, i), (wx, wi) in zip(rest, whole[3:], strict=True):
        assert i.tolist() == wi and torch.equal(x, wx)


def test_loader_order_does_not_depend_on_workers(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("orig_size", "label"))

    def epochs(workers: int) -> list[list[list[int]]]:
        loader = make_loader(ds, batch_size=5, num_workers=workers, order="quasi_random", seed=7)
        return [[b[0].tolist() for b in loader] for _ in range(2)]

    zero = epochs(0)
    assert zero[0] != zero[1]  # a new order each epoch
    assert epochs(2) == zero


def test_loader_errors(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("label",))
    with pytest.raises(ValueError, match="init_process_group"):
        make_loader(ds, batch_size=4, distributed=True)
    with pytest.raises(ValueError, match="contradicts"):
        make_loader(ds, batch_size=4, shuffle=True, order="sequential")
    plain = torch.utils.data.TensorDataset(torch.arange(10))
    with pytest.raises(ValueError, match=r"no shard_sizes.*order='random'"):
        make_loader(plain, batch_size=4, order="quasi_random")
    assert sorted(int(i) for b in make_loader(plain, 4, order="random") for i in b[0]) == list(
        range(10)
    )


def test_in_memory_reads_the_same_and_shares_one_copy(packed: Path) -> None:
    fields = ("image", "mask", "label", "orig_size")
    disk = ImageShardDataset(packed, size=64, fields=fields)
    ram = ImageShardDataset(packed, size=64, fields=fields, in_memory=True)
    for size in (64, 96):
        disk.set_size(size)
        ram.set_size(size)
        idx = [23, 0, 9, 8, 7]  # across shards
        for a, b in zip(disk.__getitems__(idx).tensors, ram.__getitems__(idx).tensors, strict=True):
            assert torch.equal(a, b)
    stored = sum(t.numel() for t in ram._memory.values())
    assert stored > 24 * 96 * 96 * 3 and all(t.is_shared() for t in ram._memory.values())
    # Spawned workers receive handles to the shared memory, not the bytes.
    assert len(ForkingPickler.dumps(ram)) < 4096 < stored
    with pytest.raises(ValueError, match="read-only"):
        ram.arrays.array(0, "image_96")[0, 0, 0, 0] = 1
    batches = make_loader(ram, batch_size=6, num_workers=2, shuffle=True)
    assert sum(len(b[0]) for b in batches) == 24


# -- two real processes under torch.distributed ------------------------------------------------


def _rank_main(rank: int, port: int, root: str, out: str) -> None:
    """One rank: the samples (as image digests) and batch counts it reads in each scenario."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        result: dict[str, Any] = {}
        for name, options in SCENARIOS.items():
            ds = ImageShardDataset(options["root"].format(root=root), fields=("image",))
            loader = make_loader(ds, batch_size=5, **options["loader"])  # distributed: automatic
            assert loader.sampler.num_replicas == 2 and loader.sampler.rank == rank
            result[name] = []
            for epoch in range(2):
                loader.sampler.set_epoch(epoch)  # every epoch, on every rank
                result[name].append([[_digest(x) for x in batch[0]] for batch in loader])
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def _digest(image: torch.Tensor) -> str:
    return hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()


SCENARIOS: dict[str, dict[str, Any]] = {
    "even": {"root": "{root}/even", "loader": {"order": "quasi_random", "window": 2}},
    "odd_pad": {"root": "{root}/odd", "loader": {"shuffle": True}},
    "odd_drop": {"root": "{root}/odd", "loader": {"shuffle": True, "drop_last": True}},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_two_ranks_read_disjoint_shares_with_equal_batches(
    raw_demo: Path, tmp_path: Path, pack_to: Any
) -> None:
    src = raw_demo / "images"
    pack_to(src, tmp_path / "even", sizes=[16], shard_size=8)  # 24 samples, 3 shards
    pack_to(src, tmp_path / "odd", sizes=[16], shard_size=8, limit=23)  # 23: uneven
    mp.spawn(_rank_main, args=(_free_port(), str(tmp_path), str(tmp_path)), nprocs=2)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]

    def dataset(name: str) -> list[str]:
        ds = ImageShardDataset(tmp_path / name, fields=("image",))
        digests = [_digest(ds[i][0]) for i in range(len(ds))]
        assert len(set(digests)) == len(digests)  # the digests identify the samples
        return digests

    even, odd = dataset("even"), dataset("odd")
    for name, samples, per_rank, batches in [
        ("even", even, 12, 3),
        ("odd_pad", odd, 12, 3),
        ("odd_drop", odd, 11, 2),  # drop_last: whole batches only
    ]:
        for epoch in range(2):
            a, b = (r[name][epoch] for r in ranks)
            assert len(a) == len(b) == batches, name
            seen_a, seen_b = [d for batch in a for d in batch], [d for batch in b for d in batch]
            if name == "odd_drop":
                assert len(seen_a) == len(seen_b) == 10
                assert not set(seen_a) & set(seen_b)
                continue
            assert len(seen_a) == len(seen_b) == per_rank
            assert set(seen_a) | set(seen_b) == set(samples), name  # cover
            overlap = len(seen_a) + len(seen_b) - len(samples)  # the padding only
            assert len(set(seen_a) & set(seen_b)) == overlap == (1 if name == "odd_pad" else 0)
        assert ranks[0][name][0] != ranks[0][name][1]  # each epoch its own order
