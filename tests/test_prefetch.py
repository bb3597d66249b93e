"""make_loader's threads (loaders.read.prefetch): the batches of the plain path, in its order; held
batches never overwritten by the ring; errors and early exits."""

from __future__ import annotations

import gc
import os
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from loaders import ImageShardDataset, make_loader
from loaders.read.loader import Batch


def loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("prep-loader")]


def as_arrays(batch: Sequence[torch.Tensor]) -> list[np.ndarray]:
    return [t.numpy().copy() for t in batch]


def epochs(loader: Any, n: int) -> list[list[np.ndarray]]:
    return [as_arrays(b) for _ in range(n) for b in loader]


class PerItem(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """A dataset without __getitems__: the loader's threads fetch and collate item by item."""

    def __len__(self) -> int:
        return 23

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3,), float(i)), i


@pytest.mark.parametrize(
    "options",
    [
        {"shuffle": False},
        {"shuffle": True, "seed": 5},
        {"order": "quasi_random", "window": 2, "drop_last": True},
    ],
)
def test_threads_read_the_batches_of_the_plain_path(packed: Path, options: dict) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("image", "label", "index"))
    plain = make_loader(ds, batch_size=5, threads=0, **options)
    want = epochs(plain, 3)
    for threads in (1, 3):
        loader = make_loader(ds, batch_size=5, threads=threads, **options)
        assert loader.threads == threads and len(loader) == len(plain)
        got = epochs(loader, 3)  # each pass a new epoch, as without threads
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert all(np.array_equal(a, b) for a, b in zip(g, w, strict=True))
        if hasattr(loader.sampler, "set_epoch"):  # a ShardSampler: set_epoch picks the epoch
            loader.sampler.set_epoch(1)
            plain.sampler.set_epoch(1)
        assert all(
            np.array_equal(a[0], b[0])
            for a, b in zip(epochs(loader, 1), epochs(plain, 1), strict=True)
        )
    per_item = [as_arrays(b) for b in make_loader(PerItem(), batch_size=4, shuffle=True)]
    plain_items = [as_arrays(b) for b in make_loader(PerItem(), 4, shuffle=True, threads=0)]
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(per_item, plain_items, strict=True))


@pytest.mark.parametrize("how", [{"threads": 2}, {"num_workers": 2}])
def test_held_batches_are_never_overwritten(packed: Path, how: dict[str, int]) -> None:
    """Threads' batches come from the loader's ring, workers' from their rings' segments: a
    batch held in any way is never written again; let go, the buffers are reused."""
    ds = ImageShardDataset(packed, size=64, fields=("image", "label"))
    loader = make_loader(ds, batch_size=4, shuffle=True, **how)
    want = epochs(make_loader(ds, batch_size=4, shuffle=True, threads=0), 5)
    held: list[Any] = []
    for j, batch in enumerate(loader):  # epoch 0: hold every batch, each in another way
        image = batch[0]
        held.append([image, image.numpy(), image[1:3], image.to("cpu"), batch][j % 5])
    for j, batch in enumerate(loader):  # epoch 1 reads while epoch 0's batches are held
        assert np.array_equal(batch[0].numpy(), want[len(held) + j][0])
    for j, h in enumerate(held):
        image = h[0] if isinstance(h, tuple) else h
        expect = want[j][0][1:3] if j % 5 == 2 else want[j][0]
        assert np.array_equal(np.asarray(image), expect)
    # Let go, the buffers are reused: a full batch comes from at most `keep` of them (a
    # worker's: in flight, being made, the caller's, the one before it), epochs 2-4 right.
    del held, batch, image, h
    gc.collect()
    seen, n = set(), len(want) // 5
    for k, b in enumerate(b for _ in range(3) for b in loader):
        assert np.array_equal(b[0].numpy(), want[2 * n + k][0])
        storage = b[0].untyped_storage()
        if len(b[0]) == 4:  # a worker's segment may be mapped twice here: its file, once
            seen.add(
                os.fstat(storage._share_fd_cpu_()[0]).st_ino
                if "num_workers" in how
                else storage.data_ptr()
            )
    assert len(seen) <= (loader.ring.keep if "threads" in how else 2 * 4)


class Failing(ImageShardDataset):
    def __getitems__(self, indices: Sequence[int]) -> Batch:
        if 7 in indices:
            raise_deep(7)
        return super().__getitems__(indices)


def raise_deep(i: int) -> None:
    raise KeyError(f"sample {i} is broken")


def test_an_error_in_a_thread_surfaces_with_its_traceback(packed: Path) -> None:
    ds = Failing(packed, size=64, fields=("label",))
    loader = make_loader(ds, batch_size=4, threads=2)
    with pytest.raises(KeyError, match="sample 7 is broken") as err:
        list(loader)
    frames = [f.name for f in traceback.extract_tb(err.value.__traceback__)]
    assert "raise_deep" in frames and "__getitems__" in frames
    gc.collect()
    assert loader_threads() == []


class Slow(ImageShardDataset):
    def __getitems__(self, indices: Sequence[int]) -> Batch:
        threading.Event().wait(0.02)  # a read still running when the caller leaves
        return super().__getitems__(indices)


def test_leaving_an_epoch_early_ends_its_threads(packed: Path) -> None:
    ds = Slow(packed, size=64, fields=("index",))
    loader = make_loader(ds, batch_size=2, threads=3)
    for _ in range(3):
        for _batch in loader:
            assert len(loader_threads()) == 3
            break
    first = next(iter(loader))  # an iterator dropped without a loop
    del _batch
    gc.collect()
    assert loader_threads() == []
    assert first[0].tolist() == [0, 1]  # each pass starts at the start
    assert [int(i) for b in loader for i in b[0]] == list(range(len(ds)))
    assert loader_threads() == []


def test_threads_only_without_worker_processes(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("label",))
    assert make_loader(ds, batch_size=4).threads > 0  # the default
    assert make_loader(ds, batch_size=4, num_workers=1).threads == 0
    with pytest.raises(ValueError, match="threads -1"):
        make_loader(ds, batch_size=4, threads=-1)


def test_threads_share_a_store_that_keeps_one_map_open(packed: Path) -> None:
    """Every read of another shard evicts a map while the other threads read theirs."""
    ds = ImageShardDataset(packed, size=64, fields=("image", "index"), max_open=1)
    want = epochs(make_loader(ds, batch_size=3, shuffle=True, threads=0), 4)
    got = epochs(make_loader(ds, batch_size=3, shuffle=True, threads=3), 4)
    assert all(np.array_equal(g[0], w[0]) for g, w in zip(got, want, strict=True))


def test_a_loader_left_early_drops_its_workers_batches_in_flight(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("image", "index"))
    want = epochs(make_loader(ds, batch_size=2, shuffle=True, threads=0), 4)
    loader = make_loader(ds, batch_size=2, shuffle=True, num_workers=2)
    held = [b for b in loader]  # epoch 0, every batch held while epochs 1-3 are read
    for _batch in loader:
        break  # left early: the persistent workers drop what is in flight
    loader.sampler.set_epoch(2)
    got = epochs(loader, 2)
    assert all(np.array_equal(g[0], w[0]) for g, w in zip(got, want[24:], strict=True))
    assert all(np.array_equal(h[0].numpy(), w[0]) for h, w in zip(held, want[:12], strict=True))


def test_a_ring_segment_is_written_again_only_once_let_go() -> None:
    from loaders.read.ring import BUSY, HELD, Segments, SharedRing

    ring, segments = SharedRing(keep=2), Segments(most=8)
    a = ring.get("image", (2, 3), torch.uint8)
    a.fill_(7)
    b = ring.get("image", (2, 3), torch.uint8)  # a is in flight: another segment
    assert a.data_ptr() != b.data_ptr() and a.is_shared()
    out = segments.hand_out((a, [b]))
    assert out[0] is a and out[1][0] is b  # handed out as they are
    assert [int(h[BUSY]) for h in segments._heads.values()] == [HELD, HELD]
    c = ring.get("image", (2, 3), torch.uint8)  # both held: a third
    assert c.data_ptr() not in (a.data_ptr(), b.data_ptr())
    del out, b
    segments.let_go()  # lets go of what nothing holds: b, not a
    assert ring.get("image", (2, 3), torch.uint8).data_ptr() not in (a.data_ptr(), c.data_ptr())
    copied = segments.hand_out([a], lambda k, s, d: torch.empty(s, dtype=d))  # pinned memory
    assert copied[0].tolist() == [[7] * 3] * 2 and not copied[0].is_shared()


def test_tune_weighs_threads_and_workers_alike(packed: Path) -> None:
    from prep.inspect.tune import TuneResult, TuneRow

    def row(workers: int, threads: int, rate: float) -> TuneRow:
        return TuneRow(workers, rate, 100.0, 1, 0, threads)

    res = TuneResult(packed, 64, 4, 2, ("image",), 24, 100)
    res.rows = [row(0, 0, 9000), row(0, 1, 8000), row(0, 2, 8300), row(2, 0, 8500)]
    assert (res.recommended.workers, res.recommended.threads) == (0, 1)  # cheapest within 10%
    assert "make_loader(ds, batch_size=4, shuffle=True, threads=1)" in res.advice()
    res.rows = [row(0, 0, 9000), row(0, 1, 3000), row(1, 0, 6000), row(2, 0, 8000)]
    assert (res.recommended.workers, res.recommended.threads) == (2, 0)
    assert "recommended: num_workers=2, prefetch_factor=2" in res.advice()
    assert "in the step" in res.table() and "1 thread" in res.table()


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("announced", [False, True])
def test_sampler_batches_are_the_batched_indices(drop_last: bool, announced: bool) -> None:
    """The threads' numpy batches of a ShardSampler equal torch's BatchSampler over it, epoch
    after epoch, and a followed sampler still announces every window (remote prefetch)."""
    from torch.utils.data import BatchSampler

    from loaders.read.samplers import ShardSampler

    made = [ShardSampler([7, 5, 9], "quasi_random", seed=2, window=2) for _ in range(2)]
    seen: list[tuple[int, int]] = []
    if announced:
        made[0].on_window = lambda epoch, k: seen.append((epoch, k))
    ours, theirs = made
    for _ in range(3):
        got = [b.tolist() for b in ours.batches(4, drop_last)]
        assert got == list(BatchSampler(theirs, 4, drop_last))
    assert seen == ([(e, k) for e in range(3) for k in range(2)] if announced else [])
