"""PackedDataset and loaders.packing: values against a per-span reading, coverage of every
document once an epoch for workers and ranks, and a tiny GPT's per-document loss packed == alone."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
import torch
from s3server import http_server
from torch.nn import functional as F
from typer.testing import CliRunner

from examples import train_gpt
from examples.train_gpt import GPT
from loaders import DocumentDataset, FormatError, PackedDataset, make_loader
from loaders.packing import block_mask, collate, flex_block_mask, packing_name, plan, save_plan
from loaders.read.samplers import ShardSampler
from prep.cli.main import app
from prep.kinds.text.config import TokenizeConfig
from prep.kinds.text.tokenize import tokenize

SEQ = 32


def tokenized(tmp: Path, lengths: Iterable[int], seed: int = 0, val: float = 0.0) -> Path:
    """A bytes-tokenized dataset, a document a line of `lengths` random letters."""
    rng = np.random.default_rng(seed)
    lines = ["".join(rng.choice(list("abcdefgh"), n)) for n in lengths]
    src = tmp / "docs.txt"
    src.write_text("\n".join(lines) + "\n")
    out = tmp / "tokens"
    cfg = TokenizeConfig(src=str(src), out=str(out), split_lines=True, val_fraction=val, jobs=1)
    tokenize(cfg, show_progress=False)
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # short documents, some of exactly SEQ, two longer than SEQ (cut into pieces)
    lengths = [5, 9, 31, 32, 2, 17, 70, 3, 12, 8, 33, 1, 20, 14, 6, 25, 4, 11]
    return tokenized(tmp_path_factory.mktemp("packed"), lengths)


def documents(root: Path) -> list[np.ndarray]:
    docs = DocumentDataset(root, split="train")  # bytes: no end-of-document token
    return [docs[i].numpy() for i in range(len(docs))]


def expected(ds: PackedDataset, s: int, docs: list[np.ndarray]) -> dict[str, list[int]]:
    """Sequence s read span by span, as the docstring says, with no vectorizing."""
    ids, labels, pos, doc_ids, cu = [], [], [], [], [0]
    for d, off, n in ds.plan().spans(s):
        piece = docs[d][off : off + n].tolist()
        ids += piece
        labels += [*piece[1:], -100]
        pos += [off + k if ds.continue_positions else k for k in range(n)]
        doc_ids += [d] * n
        cu.append(cu[-1] + n)
    pad = ds.seq_len - len(ids)
    if pad:
        cu.append(ds.seq_len)
    return dict(
        input_ids=ids + [ds.pad_id] * pad,
        labels=labels + [-100] * pad,
        position_ids=pos + list(range(pad)),
        document_ids=doc_ids + [-1] * pad,
        cu_seqlens=cu,
    )


@pytest.mark.parametrize("strategy", ["best_fit", "greedy", "concat"])
@pytest.mark.parametrize("cont", [False, True])
def test_values_per_span(data: Path, strategy: str, cont: bool) -> None:
    ds = PackedDataset(data, SEQ, strategy=strategy, seed=3, continue_positions=cont)
    docs = documents(data)
    batch = ds.__getitems__(list(range(len(ds))))["cu_seqlens"]  # the flattened batch
    rows = []
    for s in range(len(ds)):
        item = ds[s]
        want = expected(ds, s, docs)
        assert {k: v.tolist() for k, v in item.items()} == want
        assert item["cu_seqlens"].dtype == torch.int32
        rows.append(item)
    assert torch.equal(collate(rows)["cu_seqlens"], batch)
    flat = torch.cat(
        [torch.tensor(expected(ds, s, docs)["cu_seqlens"][1:]) + s * SEQ for s in range(len(ds))]
    )
    assert batch.tolist() == [0, *flat.tolist()]


def pieces_seen(rows: Iterable[dict[str, torch.Tensor]]) -> dict[tuple[int, int], int]:
    """(document, position) -> how often a token of it was read (continue_positions=True)."""
    seen: dict[tuple[int, int], int] = {}
    for row in rows:
        for d, p in zip(
            row["document_ids"].reshape(-1).tolist(),
            row["position_ids"].reshape(-1).tolist(),
            strict=False,
        ):
            if d >= 0:
                seen[(d, p)] = seen.get((d, p), 0) + 1
    return seen


def every_token(root: Path) -> dict[tuple[int, int], int]:
    return {(d, p): 1 for d, doc in enumerate(documents(root)) for p in range(len(doc))}


@pytest.mark.parametrize("workers", [0, 2])
def test_every_document_once_an_epoch_with_workers(data: Path, workers: int) -> None:
    ds = PackedDataset(data, SEQ, seed=1, window=4, continue_positions=True)
    loader = make_loader(ds, 3, shuffle=True, num_workers=workers, seed=5)
    for epoch in range(2):  # the sampler plans each pass's epoch
        batches = list(loader)
        assert ds.epoch == epoch
        assert pieces_seen(batches) == every_token(data)
        assert sum(len(b["input_ids"]) for b in batches) == len(ds.plan(epoch))


@pytest.mark.parametrize("strategy", ["best_fit", "greedy", "concat"])
def test_every_document_once_across_ranks(data: Path, strategy: str) -> None:
    ds = PackedDataset(data, SEQ, strategy=strategy, window=5, continue_positions=True)
    for epoch in (0, 1):
        shares = []
        for rank in range(2):
            sampler = ShardSampler(ds.shard_sizes, "random", seed=2, num_replicas=2, rank=rank)
            sampler.follow(ds)
            sampler.set_epoch(epoch)
            shares.append(list(sampler))
        read = sorted(set(shares[0]) | set(shares[1]))
        assert read == list(range(len(ds.plan(epoch))))  # a rank's share padded: a repeat
        assert pieces_seen(ds[i] for i in read) == every_token(data)
        assert not set(shares[0][:-1]) & set(shares[1][:-1])


def test_plan_is_a_function_of_seed_and_epoch() -> None:
    lengths = np.random.default_rng(0).integers(1, 300, 2000)
    same = [plan(lengths, 256, "best_fit", seed=7, epoch=2, window=300) for _ in range(2)]
    other = plan(lengths, 256, "best_fit", seed=7, epoch=3, window=300)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(vars(same[0]).values(), vars(same[1]).values(), strict=True)
    )
    assert not np.array_equal(same[0].doc, other.doc)
    for p in (same[0], other, plan(lengths, 256, "greedy", seed=1, window=300)):
        got = np.zeros(len(lengths), np.int64)
        np.add.at(got, p.doc, p.length)
        assert np.array_equal(got, lengths)  # every token once
        per_seq = np.add.reduceat(p.length, p.starts[:-1])
        assert per_seq.max() <= 256


def test_best_fit_known_packing() -> None:
    p = plan(np.array([3, 5, 2, 9]), seq_len=8, strategy="best_fit", window=None)
    assert [p.spans(s) for s in range(len(p))] == [  # whole sequences numbered last
        [(1, 0, 5), (0, 0, 3)],
        [(2, 0, 2), (3, 8, 1)],
        [(3, 0, 8)],
    ]


def best_fit_fills(pieces: Iterable[int], seq_len: int) -> list[int]:
    """Best fit decreasing one piece at a time, over how many sequences have each room left:
    the sequences' fills, sorted (which of two equal rooms takes a piece changes no fill)."""
    rooms = [0] * (seq_len + 1)  # rooms[r]: sequences with r tokens of room
    for size in sorted(pieces, reverse=True):
        room = next((r for r in range(size, seq_len) if rooms[r]), seq_len)
        rooms[room] -= room < seq_len
        rooms[room - size] += 1
    return sorted(seq_len - r for r, n in enumerate(rooms) for _ in range(n))


@pytest.mark.parametrize(
    ("seq_len", "low", "high", "docs"),
    [(64, 1, 300, 3000), (256, 1, 40, 3000), (200, 1, 2000, 2000), (3, 1, 3, 150_000)],
)
def test_best_fit_plan_against_a_plain_best_fit(
    seq_len: int, low: int, high: int, docs: int
) -> None:
    # many equal pieces (placed a room at a time, not one by one); the last case has over
    # 65536 sequences of pieces (their order is sorted 16 bits at a time)
    lengths = np.random.default_rng(seq_len).integers(low, high, docs)
    for window in (None, 500):
        p = plan(lengths, seq_len, "best_fit", seed=4, window=window)
        fills = np.add.reduceat(p.length, p.starts[:-1])
        assert fills.max() <= seq_len
        by = np.lexsort((p.offset, p.doc))  # each document's spans, in order
        doc, offset, length = p.doc[by], p.offset[by], p.length[by]
        first = np.r_[True, doc[1:] != doc[:-1]]
        assert np.array_equal(doc[first], np.arange(docs)) and not offset[first].any()
        at = np.cumsum(lengths)[doc] - lengths[doc] + offset  # where each span starts
        assert np.array_equal(at, np.cumsum(length) - length)  # end to end: every token once
        assert length.sum() == lengths.sum()
    whole = plan(lengths, seq_len, "best_fit", seed=4, window=None)
    fills = np.add.reduceat(whole.length, whole.starts[:-1])
    pieces = (lengths % seq_len)[lengths % seq_len > 0].tolist()
    want = best_fit_fills(pieces, seq_len) + [seq_len] * int((lengths // seq_len).sum())
    assert sorted(fills.tolist()) == sorted(want)


def test_block_mask_values() -> None:
    cu = torch.tensor([0, 2, 4, 5, 8], dtype=torch.int32)  # two rows of 4: [2, 2], [1, 3]
    m = block_mask(cu, 4)
    assert m.shape == (2, 1, 4, 4)
    want0 = [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    want1 = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 1]]
    assert m[0, 0].int().tolist() == want0 and m[1, 0].int().tolist() == want1
    with pytest.raises(ValueError, match="multiple of seq_len"):
        block_mask(torch.tensor([0, 3], dtype=torch.int32), 4)


@pytest.mark.slow  # 5 s: flex_attention unfused on a CPU
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_block_mask_matches() -> None:
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    cu = torch.tensor([0, 3, 8, 16, 20, 29, 32], dtype=torch.int32)  # two rows of 16
    q, k, v = torch.randn(3, 2, 2, 16, 8).unbind(0)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=block_mask(cu, 16))
    got = flex.flex_attention(q, k, v, block_mask=flex_block_mask(cu, 16))
    assert torch.allclose(got, want, atol=1e-5)


def losses(model: GPT, batch: dict[str, torch.Tensor], mask: torch.Tensor | None) -> torch.Tensor:
    logits = model(batch["input_ids"], batch["position_ids"], mask)
    return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), reduction="none")


def per_document(batch: dict[str, torch.Tensor], loss: torch.Tensor) -> dict[int, float]:
    docs, kept = batch["document_ids"].flatten(), batch["labels"].flatten() != -100
    return {d: float(loss[kept & (docs == d)].mean()) for d in docs[kept].unique().tolist()}


def test_packed_loss_equals_each_document_alone(tmp_path: Path) -> None:
    lengths = [7, 12, 20, 3, 9, 15, 30, 5, 11, 24, 6, 18]  # all <= SEQ: none is cut
    root = tokenized(tmp_path, lengths, seed=4)
    ds = PackedDataset(root, SEQ)
    batch = ds.__getitems__(list(range(len(ds))))
    b = {k: batch[k] for k in ("input_ids", "labels", "position_ids", "document_ids")}
    torch.manual_seed(0)
    model = GPT(256, SEQ, layers=2, heads=2, embd=32).eval()
    with torch.no_grad():
        packed = losses(model, b, block_mask(batch["cu_seqlens"], SEQ))
        causal = losses(model, b, None)
        alone = {}
        for d, doc in enumerate(documents(root)):
            x = torch.from_numpy(doc).long()[None]
            alone[d] = float(F.cross_entropy(model(x)[0, :-1], x[0, 1:]))
    got = per_document(b, packed)
    assert set(got) == set(range(len(lengths)))
    for d in got:
        assert got[d] == pytest.approx(alone[d], abs=1e-5), d
    weights = np.array([len(doc) - 1 for doc in documents(root)])  # n tokens: n - 1 labels
    mean = float(packed[b["labels"].flatten() != -100].mean())
    want = np.dot([alone[d] for d in range(len(lengths))], weights) / weights.sum()
    assert mean == pytest.approx(want, abs=1e-5)
    plain = per_document(b, causal)  # attention across documents: not each alone
    assert max(abs(plain[d] - alone[d]) for d in plain) > 1e-3


def test_stored_packing_is_used_and_another_seq_len_plans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = np.random.default_rng(1).integers(1, 90, 60).tolist()
    root = tokenized(tmp_path, lengths)  # the run stores nothing without --pack
    assert not (root / "packing").exists()
    res = CliRunner().invoke(
        app,
        [
            "tokenize",
            str(root.parent / "docs.txt"),
            str(root),
            "--split-lines",
            "--pack",
            str(SEQ),
            "--val-fraction",
            "0",
            "--overwrite",
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    whole = plan(PackedDataset(root, SEQ, stored=False).lengths, SEQ, window=None)
    assert f"train packed into {len(whole)} sequences" in res.output
    ds = PackedDataset(root, SEQ, seed=9)
    assert ds.stored == root / "packing" / f"train-{SEQ}.npz"
    for epoch in (0, 3):  # every epoch the stored one: the whole split's best fit
        ds.set_epoch(epoch)
        got = ds.plan()
        assert all(np.array_equal(getattr(got, k), getattr(whole, k)) for k in vars(whole))
    assert pieces_seen(ds[i] for i in range(len(ds))) == every_token_plain(root)
    assert capsys.readouterr().err == ""
    other = PackedDataset(root, SEQ * 2)  # another length: planned, and said once
    assert other.stored is None and len(other) > 0
    err = capsys.readouterr().err
    assert err.count(f"stored packings are for seq_len {SEQ}") == 1, err


def test_stored_packing_is_used_at_a_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = np.random.default_rng(4).integers(1, 90, 80)
    root = tokenized(tmp_path, lengths.tolist())
    have = PackedDataset(root, SEQ, stored=False).lengths  # with the end-of-document token
    # a packing no planning makes (first fit, seed 5): only reading the file gives it
    stored = plan(have, SEQ, "greedy", seed=5)
    assert not np.array_equal(stored.doc, PackedDataset(root, SEQ, stored=False).plan().doc)
    save_plan(root / packing_name("train", SEQ), stored)
    save_plan(root / packing_name("train", SEQ * 4), plan(have, SEQ * 4))
    with http_server(root) as (url, starts):
        ds = PackedDataset(url, SEQ, seed=9, cache_dir=tmp_path / "cache")
        assert ds.stored == f"{url}/packing/train-{SEQ}.npz"
        for epoch in (0, 3):  # every epoch the stored one
            ds.set_epoch(epoch)
            got = ds.plan()
            assert all(np.array_equal(getattr(got, k), getattr(stored, k)) for k in vars(stored))
        assert pieces_seen(ds[i] for i in range(len(ds))) == every_token_plain(root)
        assert starts[f"packing/train-{SEQ}.npz"] == 1  # read once
        assert capsys.readouterr().err == ""
        other = PackedDataset(url, SEQ * 2, cache_dir=tmp_path / "cache")  # planned, said once
        assert other.stored is None and len(other) == len(plan(have, SEQ * 2))
        err = capsys.readouterr().err
        assert err.count(f"stored packings are for seq_len {SEQ}, {SEQ * 4}, not") == 1, err


def every_token_plain(root: Path) -> dict[tuple[int, int], int]:
    """(document, position in its piece) of every token: positions restart in each piece."""
    seen: dict[tuple[int, int], int] = {}
    for d, doc in enumerate(documents(root)):
        for p in range(len(doc)):
            seen[(d, p % SEQ)] = seen.get((d, p % SEQ), 0) + 1
    return seen


def test_stored_packing_of_other_documents_is_refused(tmp_path: Path) -> None:
    root = tokenized(tmp_path, [10, 20, 30])
    save_plan(root / packing_name("train", SEQ), plan(np.array([10, 20, 29]), SEQ))
    with pytest.raises(FormatError, match=r"exactly once.*HINT"):
        len(PackedDataset(root, SEQ))


@pytest.mark.slow  # 20 steps and an eval, as tests/test_examples.py's
def test_train_gpt_packed_learns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tokenized(tmp_path, np.random.default_rng(2).integers(5, 60, 300).tolist(), val=0.1)
    model = ["--layers", "1", "--heads", "2", "--embd", "32", "--block", str(SEQ)]
    argv = ["--data", str(root), "--packed", "--batch-size", "8", "--epochs", "3", *model]
    losses = train_gpt.main([*argv, "--limit", "20", "--workers", "0", "--lr", "3e-3"])
    assert len(losses) == 20 and all(np.isfinite(losses))
    assert sum(losses[-5:]) < sum(losses[:5]), losses
    assert "sequences of 32 tokens" in capsys.readouterr().out


def test_a_batch_of_many_spans_across_shards_equals_its_items(tmp_path: Path) -> None:
    # 600 short documents in several shards: a batch of every sequence has more spans than are
    # copied one by one (one gather a shard), an item few (copied span by span)
    rng = np.random.default_rng(3)
    lines = ["".join(rng.choice(list("xyz"), n)) for n in rng.integers(1, 6, 600)]
    src = tmp_path / "short.txt"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "short"
    cfg = TokenizeConfig(src=str(src), out=str(out), split_lines=True, val_fraction=0.0, jobs=1)
    tokenize(cfg.__class__(**{**vars(cfg), "shard_mb": 0.0005}), show_progress=False)
    ds = PackedDataset(out, SEQ, strategy="greedy", seed=1)
    assert len(ds.store.manifest.shards) > 2
    p = ds.plan()
    assert len(p.doc) > 256  # spans
    batch = ds.__getitems__(list(range(len(ds))))
    items = [ds[i] for i in range(len(ds))]
    assert torch.equal(collate(items)["cu_seqlens"], batch["cu_seqlens"])
    for key in ("input_ids", "labels", "position_ids", "document_ids"):
        assert torch.equal(torch.stack([it[key] for it in items]), batch[key]), key
    docs = documents(out)
    assert [expected(ds, s, docs) for s in range(3)] == [
        {k: v.tolist() for k, v in items[s].items()} for s in range(3)
    ]
