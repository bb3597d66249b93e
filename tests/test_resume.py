"""A loader's state_dict()/load_state_dict(): a run stopped at any step on N ranks and W workers
resumes on M ranks and V workers with exactly the samples not yet delivered (the same pixels,
patches and mixture draws), and a state for another dataset or order is refused."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import prep
from loaders import (
    DocumentDataset,
    ImageShardDataset,
    MixedDataset,
    PatchDataset,
    SampleDataset,
    ShardSampler,
    TableDataset,
    TokenWindowDataset,
    make_loader,
)
from loaders.augment.crops import RandomResizedCrop
from prep.fields import Array, Label

EPOCH = 1  # the epoch stopped in (not 0: the dataset's epoch must be restored too)
Sample = tuple[int, ...]  # a sample's identity: its index (and source), and a digest of its data


def identities(batch: Any, ids: int = 1) -> list[Sample]:
    """Each sample of a batch as (index[, source], digest of its other fields' rows); a tuple
    ends with the index (`ids` 1), or a mixture's index and source (2)."""
    if isinstance(batch, list):  # documents, collated as a list of (tokens, index)
        batch = ([t for t, _ in batch], [int(i) for _, i in batch])
        index, data = [batch[1]], [batch[0]]
    elif isinstance(batch, dict):
        keys = [k for k in ("index", "mixture") if k in batch]
        index, data = [batch[k] for k in keys], [v for k, v in batch.items() if k not in keys]
    else:
        index, data = list(batch[-ids:]), list(batch[:-ids])
    out = []
    for j in range(len(index[0])):
        h = hashlib.sha1()
        for v in data:
            h.update(np.ascontiguousarray(np.asarray(v[j])).tobytes())
        out.append((*(int(i[j]) for i in index), int.from_bytes(h.digest()[:6], "big")))
    return out


# -- the datasets: tiny, each with an index field ------------------------------------------------


def _images(packed: Path, seed: int = 3) -> Any:  # pixels that depend on (seed, epoch, index)
    crop = RandomResizedCrop(32, seed=seed)
    return ImageShardDataset(packed, size=64, fields=("image", "label", "index"), crop=crop)


def _mixed(packed: Path) -> Any:
    parts = [_images(packed), _images(packed, seed=5)]
    return MixedDataset(parts, weights=[0.6, 0.4], seed=4, length=20)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from test_volume_pack import pack_volumes

    from prep.demo.volumes import make_phantoms
    from prep.kinds.table.config import TableConfig
    from prep.kinds.table.pack import pack_table
    from prep.kinds.text.config import TokenizeConfig
    from prep.kinds.text.tokenize import tokenize

    tmp = tmp_path_factory.mktemp("resume")
    fields = {"x": Array("float32", (3,)), "y": Label()}
    prep.pack_samples(
        lambda i: {"x": np.full(3, i, np.float32), "y": i % 4},
        list(range(27)),
        tmp / "samples",
        fields,
        show_progress=False,
        jobs=1,
        shard_size=10,
    )
    (tmp / "text").mkdir()
    for i in range(5):
        (tmp / "text" / f"d{i}.txt").write_text(" ".join(f"w{i}{j}" for j in range(20 + 3 * i)))
    tokenize(
        TokenizeConfig(src=str(tmp / "text"), out=str(tmp / "tokens"), jobs=1, val_fraction=0.0),
        show_progress=False,
    )
    rows = "\n".join(f"{i},{i * 0.5},{'abc'[i % 3]},{i % 2}" for i in range(31))
    (tmp / "t.csv").write_text("id,v,c,target\n" + rows + "\n")
    pack_table(
        TableConfig(src=str(tmp / "t.csv"), out=str(tmp / "table"), jobs=1, target="target"),
        show_progress=False,
    )
    make_phantoms(tmp / "ct", count=2, seed=1, side=16, dicom=False)
    pack_volumes(tmp / "ct" / "images", tmp / "volumes", labels=str(tmp / "ct" / "labels"))
    return {
        "samples": tmp / "samples",
        "tokens": tmp / "tokens",
        "table": tmp / "table",
        "volumes": tmp / "volumes",
    }


Make = Callable[[], Any]


@pytest.fixture(params=["images", "samples", "tokens", "documents", "table", "patches", "mixed"])
def make(request: pytest.FixtureRequest, packed: Path, roots: dict[str, Path]) -> Make:
    """A function that opens the dataset afresh (a resumed run is a new process)."""
    return {
        "images": lambda: _images(packed),
        "samples": lambda: SampleDataset(roots["samples"], fields=("x", "y", "index")),
        "tokens": lambda: TokenWindowDataset(roots["tokens"], block_size=4, index=True),
        "documents": lambda: DocumentDataset(roots["tokens"], split="train", index=True),
        "table": lambda: TableDataset(roots["table"], index=True),
        "patches": lambda: PatchDataset(
            roots["volumes"], patch=(8, 8, 4), per_volume=6, seed=2, fields=("image", "index")
        ),
        "mixed": lambda: _mixed(packed),
    }[request.param]


def loaders(ds: Any, ranks: int, workers: int, batch: int) -> list[Any]:
    """One loader per rank, in this process: each rank's sampler as under torch.distributed."""
    sizes = getattr(ds, "shard_sizes", [len(ds)])
    out = []
    for r in range(ranks):
        sampler = ShardSampler(sizes, "random", seed=11, num_replicas=ranks, rank=r)
        items = {"collate_fn": list} if getattr(ds, "itemized", False) else {}  # documents
        out.append(make_loader(ds, batch, num_workers=workers, sampler=sampler, **items))
    return out


def lockstep(group: list[Any], epoch: int, steps: int | None) -> tuple[list[Sample], list[Any]]:
    """`steps` batches (None: all) on every rank, as a DDP loop; what they held, the iterators."""
    for loader in group:
        loader.sampler.set_epoch(epoch)  # the loop's call, each epoch
    its: list[Iterator[Any]] = [iter(loader) for loader in group]
    seen: list[Sample] = []
    step = 0
    while steps is None or step < steps:
        batches = [next(it, None) for it in its]
        if batches[0] is None:
            assert all(b is None for b in batches)  # every rank: as many batches
            break
        ids = 2 if isinstance(group[0].dataset, MixedDataset) else 1
        seen += [s for b in batches for s in identities(b, ids)]
        step += 1
    return seen, its


def one_epoch(make: Make, epoch: int) -> list[Sample]:
    ds = make()
    ds.set_epoch(epoch)
    return lockstep(loaders(ds, 1, 0, 4), epoch, None)[0]


CASES = [  # (ranks, workers, batch) before the stop -> after
    ((1, 0, 4), (1, 2, 4)),
    ((2, 0, 3), (4, 0, 3)),
    ((4, 0, 2), (1, 0, 5)),  # and another batch size
    ((1, 2, 5), (2, 0, 3)),
]


@pytest.mark.parametrize(("before", "after"), CASES)
def test_resume_reads_exactly_the_rest(
    make: Make, before: tuple[int, int, int], after: tuple[int, int, int]
) -> None:
    whole = one_epoch(make, EPOCH)
    assert len(set(whole)) == len(whole)  # the identities tell the samples apart
    ds = make()
    ds.set_epoch(EPOCH)
    first = loaders(ds, *before)
    steps = len(first[0])
    stop = int(np.random.default_rng([len(whole), *before, *after]).integers(0, steps))
    read, its = lockstep(first, EPOCH, stop)
    states = [loader.state_dict() for loader in first]  # batches read ahead: not delivered
    assert all(s == states[0] for s in states)  # one global position, whichever rank saves
    saved = json.loads(json.dumps(states[0]))  # JSON-able, and small
    assert len(json.dumps(saved)) < 400 and saved["epoch"] == EPOCH
    del its

    again = make()  # a new process: the dataset's epoch is 0 until the state sets it
    group = loaders(again, *after)
    for loader in group:
        loader.load_state_dict(saved)
    rest, _ = lockstep(group, EPOCH, None)  # set_epoch(EPOCH) keeps the pending resume
    assert len(set(read)) == len(read) == saved["delivered"]
    assert not set(read) & set(rest)  # none twice
    assert set(read) | set(rest) == set(whole)  # none missed, with the same data
    ranks = after[0]
    left = len(whole) - len(read)
    assert len(rest) == -(-left // ranks) * ranks  # the rest, padded to even out the ranks only


def test_resumed_batches_equal_the_unbroken_run(packed: Path) -> None:
    """The same ranks and batch size: the rest of the epoch is the same batches, same pixels."""
    whole = [identities(b) for b in _pass(_images(packed), 0, None)[0]]
    batches, loader = _pass(_images(packed), 0, 2)
    assert [identities(b) for b in batches] == whole[:2]
    state = loader.state_dict()
    assert state["delivered"] == 2 * 5
    fresh = make_loader(_images(packed), 5, shuffle=True, seed=1)
    fresh.load_state_dict(state)
    rest = [identities(b) for b in fresh]
    assert rest == whole[2:]  # identities hold the crops' pixels: equal too
    assert fresh.state_dict()["epoch"] == 1 and fresh.state_dict()["delivered"] == 0


def _pass(ds: Any, workers: int, steps: int | None) -> tuple[list[Any], Any]:
    loader = make_loader(ds, 5, shuffle=True, seed=1, num_workers=workers)
    out = []
    for batch in loader:
        out.append(tuple(t.clone() for t in batch))
        if steps is not None and len(out) == steps:
            break
    return out, loader


@pytest.mark.parametrize("workers", [0, 2])
def test_prefetched_batches_are_not_delivered(packed: Path, workers: int) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("index",))
    loader = make_loader(ds, 4, shuffle=True, num_workers=workers)
    it = iter(loader)
    assert loader.state_dict()["delivered"] == 0
    next(it)  # the threads or workers have read further ahead by now
    assert loader.state_dict()["delivered"] == 4
    for _ in range(5):
        next(it)
    after_last = loader.state_dict()  # six batches of 4: the epoch's last handed out
    assert (after_last["epoch"], after_last["delivered"]) == (1, 0)
    resumed = make_loader(ds, 4, shuffle=True, num_workers=workers)
    resumed.load_state_dict(after_last)
    expected = ShardSampler([24], "random", seed=0).indices(1).tolist()
    assert [i for (b,) in resumed for i in b.tolist()] == expected  # the next epoch, whole


def test_a_new_epoch_drops_the_pending_resume(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("index",))
    loader = make_loader(ds, 4, shuffle=True)
    state = {**loader.state_dict(), "epoch": 3, "delivered": 20}
    loader.load_state_dict(state)
    assert len(loader) == 1 and loader.state_dict() == state
    loader.sampler.set_epoch(3)  # the same epoch: kept
    assert len(loader) == 1
    loader.sampler.set_epoch(4)  # another: whole
    assert len(loader) == 6 and loader.state_dict()["delivered"] == 0


def test_states_for_another_dataset_or_order_are_refused(packed: Path, roots: Any) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("index",))
    state = make_loader(ds, 4, shuffle=True, seed=1).state_dict()
    other = SampleDataset(roots["samples"], fields=("y",))
    for loader, said in [
        (make_loader(other, 4, shuffle=True, seed=1), "another dataset"),
        (
            make_loader(
                ImageShardDataset(packed, size=64, split=None, fields=("label",)),
                4,
                shuffle=True,
                seed=2,
            ),
            r"seed=1.*seed=2",
        ),
        (make_loader(ds, 4, seed=1), r"order='random'.*order='sequential'"),
        (make_loader(ds, 4, order="quasi_random", seed=1), "quasi_random"),
    ]:
        with pytest.raises(ValueError, match=said) as e:
            loader.load_state_dict(state)
        assert "\n" not in str(e.value) and "HINT" in str(e.value)
    loader = make_loader(ds, 4, shuffle=True, seed=1)
    for bad in [{}, {**state, "version": 9}, {**state, "delivered": 25}, {**state, "epoch": -1}]:
        with pytest.raises(ValueError, match="loader state"):
            loader.load_state_dict(bad)
    with pytest.raises(ValueError, match="sampler of its own"):
        make_loader(ds, 4, sampler=list(range(24))).state_dict()


@pytest.mark.parametrize("ranks", [1, 3])
def test_a_resumed_quasi_random_pass_announces_every_window(ranks: int) -> None:
    """A remote dataset fetches each window as the sampler announces it: a resumed pass still
    announces each, those begun before the resume point at its first batch."""

    def sampler(rank: int) -> tuple[ShardSampler, list[tuple[int, int]]]:
        s = ShardSampler(
            [8, 8, 8, 5], "quasi_random", seed=5, window=2, num_replicas=ranks, rank=rank
        )
        said: list[tuple[int, int]] = []
        s.on_window = lambda epoch, k: said.append((epoch, k))
        s.set_epoch(3)
        return s, said

    for rank in range(ranks):
        whole, said_whole = sampler(rank)
        full = [i for b in whole.batches(2, False) for i in b.tolist()]
        resumed, said = sampler(rank)
        resumed.resume(3, 6 * ranks)  # three batches of 2 on each rank delivered
        rest = [i for b in resumed.batches(2, False) for i in b.tolist()]
        assert said == said_whole
        order = ShardSampler([8, 8, 8, 5], "quasi_random", seed=5, window=2).indices(3)
        if ranks == 1:  # the rest of the unbroken pass
            assert rest == full[6:] == order[6:].tolist()
        else:  # every third of the rest from position 18, padded with the rest's first
            assert rest == np.resize(order[18:], 12)[rank::3].tolist()


def test_every_clip_of_every_video_is_ordered(tmp_path: Path) -> None:
    """ClipDataset with clips_per_video k: an epoch of make_loader's orders is k clips a video
    (the sampler used to order the videos' count of clips only)."""
    pytest.importorskip("av", reason="prep video needs PyAV (pip install '.[media]')")
    from test_video import pack

    from loaders import ClipDataset
    from prep.demo.video import make_video_demo

    make_video_demo(tmp_path / "raw", per_class=1, seed=0)
    pack(tmp_path / "raw", tmp_path / "clips", mode="fill")
    ds = ClipDataset(tmp_path / "clips", frames=2, clips_per_video=3)
    loader = make_loader(ds, 4, shuffle=True)
    assert sorted(loader.sampler) == list(range(len(ds)))  # clip i: video i // 3
    assert sum(len(clips) for clips, _ in loader) == len(ds)
