"""order="chunk_random": token windows of a --compress zstd pack in a shuffled order that reads
a window of chunks at a time, so each chunk is decompressed once an epoch (issue 40, row 40e).
Every window once, fixed by (seed, epoch), the same batches for any worker count, resumable, and
the values of the raw pack."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import prep.run.shardwriter
from loaders import TokenWindowDataset, make_loader
from loaders.format import kept
from prep.cli.main import app

pytest.importorskip("zstandard")
CHUNK = 64  # tokens a chunk (uint8 tokens: CHUNK_BYTES 64)
BLOCK, STRIDE = 16, 5


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A char-tokenized corpus in 5 shards, raw and in zstd chunks of 64 tokens."""
    tmp = tmp_path_factory.mktemp("chunk_order")
    (tmp / "src").mkdir()
    for i in range(9):
        (tmp / "src" / f"d{i}.txt").write_text(f"document {i} says " + "abcab xyz " * (i * 7 + 20))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prep.run.shardwriter, "CHUNK_BYTES", CHUNK)
        for name, more in (("raw", []), ("zstd", ["--compress", "zstd"])):
            args = ["tokenize", str(tmp / "src"), str(tmp / name), "-t", "char", "-q", "-j", "1"]
            args += ["--val-fraction", "0", "--shard-mb", "0.0006", "--backend", "threads"]
            res = CliRunner().invoke(app, [*args, *more])
            assert res.exit_code == 0, res.output
    yield tmp / "raw", tmp / "zstd"


def windows(root: Path) -> TokenWindowDataset:
    return TokenWindowDataset(root, block_size=BLOCK, stride=STRIDE, index=True)


def chunk_of_each_window(raw: Path, n: int) -> list[tuple[int, int]]:
    """(shard, chunk) windows 0..n-1 start in, from the raw shards' token counts alone."""
    lengths = [len(np.load(p)) for p in sorted(raw.glob("tokens-train-*.npy"))]
    starts = np.cumsum([0, *lengths])
    out = []
    for i in range(n):
        shard = int(np.searchsorted(starts, i * STRIDE, "right")) - 1
        out.append((shard, (i * STRIDE - int(starts[shard])) // CHUNK))
    return out


def epoch(ds: TokenWindowDataset, **kw: Any) -> list[list[int]]:
    loader = make_loader(ds, batch_size=7, order="chunk_random", **kw)
    return [batch[-1].tolist() for batch in loader]


@pytest.mark.parametrize("window", [1, 3])
def test_every_window_once_a_window_of_chunks_at_a_time(
    packs: tuple[Path, Path], window: int
) -> None:
    ds = windows(packs[1])
    chunk = chunk_of_each_window(packs[0], len(ds))
    assert len(set(chunk)) > 5 * 3  # several chunks a shard
    order = [i for b in epoch(ds, seed=4, window=window) for i in b]
    assert sorted(order) == list(range(len(ds)))
    groups: list[set[tuple[int, int]]] = []  # the chunks of each window, in reading order
    for c in (chunk[i] for i in order):
        if not groups or (c not in groups[-1] and len(groups[-1]) == window):
            groups.append(set())
        groups[-1].add(c)
    assert sum(len(g) for g in groups) == len(set(chunk))  # each chunk read in one window only
    assert all(len(g) == window for g in groups[:-1])
    loader = make_loader(ds, batch_size=7, order="chunk_random", seed=4, window=window)
    first, second = ([b[-1].tolist() for b in loader] for _ in range(2))
    assert first == epoch(ds, seed=4, window=window) != second  # fixed by (seed, epoch)
    assert epoch(ds, seed=5, window=window) != first


def test_zstd_windows_equal_raw_and_workers_read_the_same_batches(
    packs: tuple[Path, Path],
) -> None:
    raw, packed = windows(packs[0]), windows(packs[1])

    def batches(workers: int) -> list[tuple[torch.Tensor, ...]]:
        loader = make_loader(packed, 7, order="chunk_random", window=2, num_workers=workers)
        return [tuple(t.clone() for t in b) for b in loader]

    zero = batches(0)
    for (x, y, i), (x2, y2, i2) in zip(zero, batches(2), strict=True):
        assert torch.equal(i, i2) and torch.equal(x, x2) and torch.equal(y, y2)
    for x, y, i in zero:
        want = raw.__getitems__(i.tolist()).tensors
        assert torch.equal(x, want[0]) and torch.equal(y, want[1])
    tokens = np.concatenate([np.load(p) for p in sorted(packs[0].glob("tokens-train-*.npy"))])
    x, y, i = zero[0]
    start = i[0].item() * STRIDE
    assert x[0].tolist() == tokens[start : start + BLOCK].tolist()  # the tokens themselves
    assert y[0].tolist() == tokens[start + 1 : start + BLOCK + 1].tolist()


def frames(ds: TokenWindowDataset) -> int:
    """Chunks decompressed into the kept ones, over the dataset's shards."""
    return sum(ds.arrays.array(s, "tokens").frames_read for s in range(5))


def test_each_chunk_is_decompressed_once_an_epoch(
    packs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kept, "KEPT_BYTES", 8 * kept.SLOT_BYTES)  # 8 chunks kept, windows of 4
    ds = windows(packs[1])
    chunks = len(set(chunk_of_each_window(packs[0], len(ds))))
    assert ds.chunk_window == 4 and chunks > 8
    assert sum(len(b) for b in epoch(ds, threads=0)) == len(ds)
    # once each; a window across a shard's end reads the chunks on both sides again at most
    assert chunks <= frames(ds) <= chunks + 2 * 4
    shuffled = windows(packs[1])
    for _ in make_loader(shuffled, batch_size=7, order="random", threads=0):
        pass
    assert frames(shuffled) > 2 * chunks  # a chunk again for most batches


def test_a_budget_smaller_than_a_batch_reads_the_same(
    packs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kept, "KEPT_BYTES", kept.SLOT_BYTES)  # one chunk kept
    raw, packed = windows(packs[0]), windows(packs[1])
    idx = np.random.default_rng(0).permutation(len(raw))[:40].tolist()
    for a, b in zip(raw.__getitems__(idx).tensors, packed.__getitems__(idx).tensors, strict=True):
        assert torch.equal(a, b)
    tokens = packed.arrays.array(2, "tokens")
    assert np.array_equal(
        tokens[[5, -1, 70, 6]], np.load(packs[0] / "tokens-train-00002.npy")[[5, -1, 70, 6]]
    )
    assert np.array_equal(np.asarray(tokens), np.load(packs[0] / "tokens-train-00002.npy"))


def test_threads_sharing_few_kept_chunks_read_the_same(
    packs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threads letting go of each other's chunks: a read of one refilled meanwhile reads again."""
    monkeypatch.setattr(kept, "KEPT_BYTES", 3 * kept.SLOT_BYTES)
    raw, packed = windows(packs[0]), windows(packs[1])
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, len(raw), 3).tolist() for _ in range(400)]

    def read(idx: list[int]) -> bool:
        a, b = raw.__getitems__(idx).tensors, packed.__getitems__(idx).tensors
        return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(read, batches))


def test_a_resumed_epoch_reads_the_rest(packs: tuple[Path, Path]) -> None:
    ds = windows(packs[1])
    whole = epoch(ds, seed=3, window=2)
    loader = make_loader(ds, batch_size=7, order="chunk_random", seed=3, window=2)
    it = iter(loader)
    read = [next(it)[-1].tolist() for _ in range(4)]
    state = loader.state_dict()
    assert read == whole[:4] and state["delivered"] == 28
    again = make_loader(windows(packs[1]), 7, order="chunk_random", seed=3, window=2, num_workers=2)
    again.load_state_dict(state)
    assert [b[-1].tolist() for b in again] == whole[4:]
    other = make_loader(windows(packs[1]), 7, order="chunk_random", seed=3, window=3)
    with pytest.raises(ValueError, match="window=2"):
        other.load_state_dict(state)
    plain = torch.utils.data.TensorDataset(torch.arange(10))
    with pytest.raises(ValueError, match=r"no chunk_sizes.*order='random'"):
        make_loader(plain, batch_size=4, order="chunk_random")


def test_a_chunk_two_threads_kept_at_once_holds_one_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads that both found chunk 0 missing fill a slot each: the first one published
    stays, the second is free again, and letting go of the chunk tells a reader under way."""
    monkeypatch.setattr(kept, "KEPT_BYTES", 2 * kept.SLOT_BYTES)
    pool = kept.Kept()

    class Array:
        slot_of, lets_go = np.full(4, -1, np.int64), 0

    a = Array()
    _, [(_, first)] = pool.reserve(a, [0], np.array([0]))
    _, [(_, second)] = pool.reserve(a, [0], np.array([0]))  # before the first is published
    pool.publish(a, 0, first, True)
    pool.publish(a, 0, second, True)
    assert a.slot_of[0] == first and list(pool.owners) == [first] and pool.free == [second]
    before = a.lets_go
    pool.reserve(a, [1, 2], np.array([1, 2]))  # two more chunks: chunk 0 is let go
    assert a.slot_of[0] == -1 and a.lets_go == before + 1
