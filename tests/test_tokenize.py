"""prep tokenize and the token datasets: round trips, dtypes, splits, parallel runs, windows."""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import pickle
import re
import resource
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import group_gone
from typer.testing import CliRunner

from loaders import DocumentDataset, TokenWindowDataset, make_loader
from loaders.format import read_manifest
from prep import PrepError
from prep.cli.main import app
from prep.kinds.text.config import TokenizeConfig
from prep.kinds.text.shard import fit_ids, tokenize_shard
from prep.kinds.text.tokenize import TokenizeSummary, plan_shards, token_dtype, tokenize
from prep.media.text.documents import DocumentReader, Piece, list_text
from prep.media.text.tokenizers import ByteTokenizer, load_tokenizer
from prep.run.staging import RUN_DIR

# Raw file bytes -> the document text decode(tokens) must give back (see prep/text.py).
DOCS: dict[str, tuple[bytes, str]] = {
    "a.txt": ("Naïve café, 東京 and 🙂 emoji.\n".encode(), "Naïve café, 東京 and 🙂 emoji.\n"),
    "b.txt": (b"windows\r\nline\r\nlone\rcr\r\n", "windows\nline\nlone\rcr\n"),
    "c.txt": (b"", ""),
    "d.txt": (
        "\ufeffbom then text, then \U0001f469\u200d\U0001f4bb".encode(),
        "bom then text, then \U0001f469\u200d\U0001f4bb",
    ),
    "e.txt": (
        b"special <|endoftext|> text is plain text",
        "special <|endoftext|> text is plain text",
    ),
    "f.txt": (b"  spaces\t\ttabs  \n\n\n", "  spaces\t\ttabs  \n\n\n"),
}


def run(src: Path, out: Path, **options: Any) -> TokenizeSummary:
    options.setdefault("jobs", 1)
    options.setdefault("val_fraction", 0.0)
    return tokenize(TokenizeConfig(src=str(src), out=str(out), **options), show_progress=False)


def write_docs(folder: Path, docs: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in docs.items():
        (folder / name).write_bytes(data)
    return folder


def decoded(out: Path, split: str = "train") -> list[str]:
    tok = load_tokenizer(out)
    return [tok.decode(t) for t in DocumentDataset(out, split=split)]


def stream(out: Path, split: str = "train") -> np.ndarray:
    m = read_manifest(out)
    parts = [np.load(out / s.arrays["tokens"].file) for s in m.shards if s.split == split]
    return np.concatenate(parts)


def corpus(tmp_path: Path, n: int = 30) -> Path:
    words = ["alpha", "béta", "γάμμα", "東京", "🙂", "delta", "\n", "shard", "token"]
    rng = np.random.default_rng(0)
    docs = {
        f"doc{i:02d}.txt": " ".join(words[j] for j in rng.integers(0, len(words), 40)).encode()
        for i in range(n)
    }
    return write_docs(tmp_path / "corpus", docs)


@pytest.fixture(scope="module")
def user_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer.json brought by the user: here one trained by an earlier bpe run."""
    tmp = tmp_path_factory.mktemp("user")
    src = corpus(tmp)
    run(src, tmp / "trained", tokenizer="bpe", vocab_size=300)
    return tmp / "trained" / "tokenizer.json"


# ---------------------------------------------------------------- what comes back


@pytest.mark.parametrize("name", ["bytes", "char", "bpe", "json"])
def test_round_trip_every_tokenizer(name: str, tmp_path: Path, user_tokenizer: Path) -> None:
    src = write_docs(tmp_path / "src", {k: v[0] for k, v in DOCS.items()})
    spec = str(user_tokenizer) if name == "json" else name
    summary = run(src, tmp_path / "out", tokenizer=spec, vocab_size=300)
    assert decoded(tmp_path / "out") == [text for _, text in DOCS.values()]
    m = read_manifest(tmp_path / "out")
    assert m.fields["tokens"]["tokenizer_name"] == name and summary.docs == len(DOCS)
    docs = DocumentDataset(tmp_path / "out", split="train")
    ids = stream(tmp_path / "out")
    eot = m.fields["tokens"]["eot_id"]
    assert (eot is None) == (name == "bytes")
    if eot is not None:  # one eot after every document, the empty one too; none inside
        ends = [docs.span(i)[1] - 1 for i in range(len(docs))]
        assert np.flatnonzero(ids == eot).tolist() == ends
    train = [s.arrays["tokens"].length for s in m.shards if s.split == "train"]
    assert sum(train) == len(ids) == summary.tokens
    if name == "json":  # used as it is: the user's file, byte for byte
        assert (tmp_path / "out" / "tokenizer.json").read_bytes() == user_tokenizer.read_bytes()


def test_split_lines_and_jsonl_documents(tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_bytes("\ufeffone\r\n\r\ntwo 🙂\rthree\nlast, no newline".encode())
    run(lines, tmp_path / "l", tokenizer="char", split_lines=True)
    assert decoded(tmp_path / "l") == ["one", "", "two 🙂\rthree", "last, no newline"]

    records = ['{"body": "x\\r\\ny"}', "", '{"body": "東京"}', "not json", '{"other": 1}']
    jl = tmp_path / "docs.jsonl"
    jl.write_bytes(("\ufeff" + "\n".join(records) + "\n").encode())
    summary = run(jl, tmp_path / "j", tokenizer="bytes", text_field="body", max_rejects=1)
    assert decoded(tmp_path / "j") == ["x\ny", "東京"]
    rejects = [json.loads(x) for x in (tmp_path / "j" / "rejects.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in rejects] == ["json", "no_text"] and summary.rejected == 2
    assert all(r["path"] == "docs.jsonl" for r in rejects)


def test_sources_of_many_line_documents(tmp_path: Path) -> None:
    """Each document's source, for runs of documents of one file across the 65,536 a shard's
    sources are written by."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"x\ny\nz\n")
    (src / "b.txt").write_bytes(b"w\n" * 65_540)
    (src / "c.txt").write_bytes(b"last\n")
    run(src, tmp_path / "out", tokenizer="bytes", split_lines=True)
    ds = DocumentDataset(tmp_path / "out", split="train")
    assert len(ds) == 3 + 65_540 + 1
    want = {0: "a.txt", 2: "a.txt", 3: "b.txt", 65_535: "b.txt", 65_538: "b.txt"}
    want |= {65_542: "b.txt", 65_543: "c.txt"}
    assert {i: ds.source(i) for i in want} == want


def test_resume_redoes_a_shard_an_older_prep_left(tmp_path: Path) -> None:
    """A run started by a prep of format version 2 (the document offsets an array of their
    own, doc_offsets), resumed by this one: its shard is tokenized again (a ValueError at the
    manifest once)."""
    src = write_docs(tmp_path / "src", {"good.txt": b"fine", "bad.txt": b"caf\xc3(e"})
    with pytest.raises(PrepError, match="rejected"):
        run(src, tmp_path / "out")
    staging, path = tmp_path / "out.partial", tmp_path / "out.partial/.prep-run/00000.json"
    record = json.loads(path.read_text())
    (shard,) = record["splits"]
    off = shard["arrays"]["tokens"].pop("offsets")
    old = off["file"].replace("tokens-offsets", "doc_offsets")
    (staging / off["file"]).rename(staging / old)
    shard["arrays"]["doc_offsets"] = off | {"file": old}
    shard["files"][old] = shard["files"].pop(off["file"])
    record["shard"]["files"] = shard["files"]
    path.write_text(json.dumps(record))
    summary = run(src, tmp_path / "out", max_rejects=0.5, resume=True)
    assert summary.reused == 0 and decoded(tmp_path / "out") == ["fine"]


def test_invalid_utf8_rejected_with_byte_offset_or_replaced(tmp_path: Path) -> None:
    src = write_docs(tmp_path / "src", {"good.txt": b"fine", "bad.txt": b"caf\xc3(e and more"})
    with pytest.raises(PrepError, match=r"1 of 2 documents rejected.*HINT"):
        run(src, tmp_path / "strict")
    run(src, tmp_path / "strict", max_rejects=0.5, resume=True)
    (reject,) = [
        json.loads(x) for x in (tmp_path / "strict/rejects.jsonl").read_text().split("\n") if x
    ]
    assert reject["path"] == "bad.txt" and reject["reason"] == "utf8"
    assert "byte 3" in reject["message"] and "--errors replace" in reject["message"]
    assert decoded(tmp_path / "strict") == ["fine"]

    run(src, tmp_path / "replace", errors="replace", tokenizer="char")
    assert decoded(tmp_path / "replace") == ["caf\ufffd(e and more", "fine"]

    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"ok\nab\xffc\n")
    run(lines, tmp_path / "l", split_lines=True, max_rejects=1)
    (reject,) = [json.loads(x) for x in (tmp_path / "l/rejects.jsonl").read_text().splitlines()]
    assert "byte 5" in reject["message"]  # offset in the file, not in the line


def test_long_lines_rejected_with_bounded_memory(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.write(b"short\n" + b"x" * (24 << 20) + b"\nafter\n")
    reader = DocumentReader("text", "strict", 1 << 20)
    tracemalloc.start()
    docs = list(reader.read(Piece(str(big), "big.txt", 0, big.stat().st_size, "lines")))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert docs == ["short", "after"]
    assert [r["reason"] for r in reader.rejects] == ["too_long"]
    assert peak < 4 << 20, f"peak {peak / 2**20:.1f} MB reading a 24 MB line"


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    ("vocab", "dtype"),
    [
        (255, "uint8"),
        (256, "uint8"),
        (257, "uint16"),
        (65535, "uint16"),
        (65536, "uint16"),
        (65537, "uint32"),
    ],
)
def test_dtype_at_vocabulary_boundaries(vocab: int, dtype: str, tmp_path: Path) -> None:
    assert token_dtype(vocab) == dtype
    # End to end with the char tokenizer: vocab - 1 distinct characters plus its eot id.
    points = [c for c in range(0x20, 0x30000) if not 0xD800 <= c <= 0xDFFF][: vocab - 1]
    text = "".join(map(chr, points))
    src = write_docs(tmp_path / "src", {"all.txt": text.encode()})
    summary = run(src, tmp_path / "out", tokenizer="char")
    assert summary.vocab_size == vocab and summary.dtype == dtype
    assert np.load(tmp_path / "out" / "tokens-train-00000.npy").dtype == dtype
    assert decoded(tmp_path / "out") == [text]


def test_id_outside_dtype_is_an_error_never_a_wrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(PrepError, match="token id 256 does not fit uint8"):
        fit_ids(np.array([0, 255, 256]), "uint8", "x.txt")
    with pytest.raises(PrepError, match="token id -1 does not fit uint16"):
        fit_ids(np.array([-1, 3]), "uint16", "x.txt")
    assert fit_ids(np.array([0, 65535]), "uint16", "x.txt").dtype == np.uint16

    def wrong(self: ByteTokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return np.array([65, 300], np.int64), np.array([2], np.int64)

    monkeypatch.setattr(ByteTokenizer, "encode", wrong)
    src = write_docs(tmp_path / "src", {"one.txt": b"A"})
    with pytest.raises(PrepError, match=r"one\.txt: token id 300 does not fit uint8.*HINT"):
        run(src, tmp_path / "out")


# ---------------------------------------------------------------- plan, parallel, split


def test_plan_cuts_line_files_at_line_starts(tmp_path: Path) -> None:
    path = tmp_path / "l.txt"
    data = b"".join(b"line %d %s\n" % (i, b"y" * (i % 17)) for i in range(300))
    path.write_bytes(data)
    pieces, _ = list_text(path, split_lines=True)
    shards = plan_shards(pieces, 500)
    flat = [p for s in shards for p in s]
    assert len(shards) > 5 and flat[0].start == 0 and flat[-1].end == len(data)
    assert all(a.end == b.start for a, b in itertools.pairwise(flat))
    assert all(data[p.start - 1 : p.start] == b"\n" for p in flat[1:])


@pytest.mark.parametrize("name", ["char", "bpe"])
def test_same_bytes_for_any_jobs(name: str, tmp_path: Path) -> None:
    src = corpus(tmp_path)
    big = write_docs(src, {"lines.txt": b"".join(b"%d line\r\n" % i for i in range(400))})
    for jobs in (1, 2):
        s = run(
            big,
            tmp_path / f"j{jobs}",
            tokenizer=name,
            vocab_size=300,
            jobs=jobs,
            shard_mb=0.002,
            split_lines=True,
            val_fraction=0.2,
        )
        assert s.shards > 3
    a, b = sorted((tmp_path / "j1").iterdir()), sorted((tmp_path / "j2").iterdir())
    assert [p.name for p in a] == [p.name for p in b]
    for pa, pb in zip(a, b, strict=True):
        if pa.name == "manifest.json":
            ja, jb = json.loads(pa.read_text()), json.loads(pb.read_text())
            assert ja["config"].pop("out") != jb["config"].pop("out")
            assert ja == jb
        else:
            assert pa.read_bytes() == pb.read_bytes(), pa.name


def test_split_depends_on_content_not_names_order_or_shards(tmp_path: Path) -> None:
    src = corpus(tmp_path, n=40)
    first = run(src, tmp_path / "a", val_fraction=0.3)
    assert 0 < first.val_docs < first.docs
    val, train = set(decoded(tmp_path / "a", "val")), set(decoded(tmp_path / "a", "train"))
    moved = tmp_path / "renamed"
    moved.mkdir()
    for i, p in enumerate(sorted(src.iterdir(), reverse=True)):  # reversed order, new names
        p.rename(moved / f"{i:03d}-{p.stem[::-1]}.txt")
    run(moved, tmp_path / "b", val_fraction=0.3, shard_mb=0.001, jobs=2)
    assert set(decoded(tmp_path / "b", "val")) == val
    assert set(decoded(tmp_path / "b", "train")) == train
    assert decoded(tmp_path / "b", "val") != decoded(tmp_path / "a", "val")  # order did change


# ---------------------------------------------------------------- run folder


def test_limit_overwrite_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = tmp_path / "l.txt"
    lines.write_bytes(b"".join(b"doc %d\n" % i for i in range(300)))
    run(lines, tmp_path / "out", split_lines=True, limit=7)
    assert decoded(tmp_path / "out") == [f"doc {i}" for i in range(7)]
    with pytest.raises(PrepError, match=r"already exists.*--overwrite"):
        run(lines, tmp_path / "out", split_lines=True)

    import prep.kinds.text.tokenize as tk

    real = tokenize_shard

    def dies_on_shard_2(index: int, *args: Any) -> dict[str, Any]:
        if index == 2:
            raise KeyboardInterrupt
        return real(index, *args)

    monkeypatch.setattr(tk.TextKind, "task", staticmethod(dies_on_shard_2))
    opts: dict[str, Any] = {"split_lines": True, "shard_mb": 0.0002, "tokenizer": "char"}
    with pytest.raises(KeyboardInterrupt):
        run(lines, tmp_path / "out", overwrite=True, **opts)
    assert decoded(tmp_path / "out") == [f"doc {i}" for i in range(7)]  # old one still there
    monkeypatch.setattr(tk.TextKind, "task", staticmethod(real))
    assert (tmp_path / "out.partial").is_dir()
    summary = run(lines, tmp_path / "out", resume=True, overwrite=True, **opts)
    assert summary.reused == 2 and summary.shards > 3
    assert decoded(tmp_path / "out") == [f"doc {i}" for i in range(300)]


def test_no_input_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(PrepError, match=r"no readable \.txt.*HINT"):
        run(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(PrepError, match=r"unknown tokenizer 'gpt9'.*HINT"):
        run(tmp_path / "empty", tmp_path / "out", tokenizer="gpt9")


def test_cli(tmp_path: Path) -> None:
    src = write_docs(tmp_path / "src", {"a.txt": "héllo".encode(), "b.txt": b"world"})
    runner = CliRunner()
    res = runner.invoke(app, ["tokenize", str(src), str(tmp_path / "o"), "-t", "char", "-q"])
    assert res.exit_code == 0, res.output
    assert "2 documents" in res.output and "char vocabulary 8 as uint8" in res.output
    res = runner.invoke(app, ["tokenize", str(src), str(tmp_path / "o2"), "--errors", "ignore"])
    assert res.exit_code == 2 and "errors 'ignore'" in res.output  # a bad value: usage
    info = runner.invoke(app, ["info", str(tmp_path / "o")])
    assert "2 documents" in info.output and "tokenizer char" in info.output
    assert "train: 12 tokens in 2 documents" in info.output  # 10 characters, 2 end tokens
    assert runner.invoke(app, ["verify", str(tmp_path / "o")]).exit_code == 0
    (tmp_path / "o" / "chars.json").write_text("{}")  # the tokenizer, tampered: verify names it
    res = runner.invoke(app, ["verify", str(tmp_path / "o")])
    assert res.exit_code == 1 and "chars.json checksum differs" in res.output


# ---------------------------------------------------------------- loading


@pytest.fixture(scope="module")
def windows_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bytes tokens, no eot, several train shards: windows cross documents and shards."""
    tmp = tmp_path_factory.mktemp("win")
    src = corpus(tmp, n=40)
    run(src, tmp / "out", shard_mb=0.0005, val_fraction=0.2)
    return tmp / "out"


@pytest.mark.parametrize("block", [1, 7, 64])
def test_windows_are_shifted_pairs_over_the_split(windows_ds: Path, block: int) -> None:
    ids = stream(windows_ds).astype(np.int64)
    m = read_manifest(windows_ds)
    ds = TokenWindowDataset(windows_ds, block_size=block, split="train")
    assert len(ds) == (len(ids) - 1) // block
    x, y = ds.__getitems__(list(range(len(ds)))).tensors
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (len(ds), block)
    assert x.is_contiguous() and y.is_contiguous()
    want = np.lib.stride_tricks.sliding_window_view(ids, block + 1)[::block][: len(ds)]
    assert np.array_equal(x.numpy(), want[:, :-1]) and np.array_equal(y.numpy(), want[:, 1:])
    ends = np.cumsum([s.arrays["tokens"].length for s in m.shards if s.split == "train"])
    starts = np.arange(len(ds)) * block
    assert ((starts[:, None] < ends) & (starts[:, None] + block >= ends)).any()  # spans a shard
    assert torch.equal(ds[-1][0], x[-1]) and torch.equal(ds[3][1], y[3])


def test_window_dataset_pickles_small_and_loads(windows_ds: Path) -> None:
    ds = TokenWindowDataset(windows_ds, block_size=16, split="val", stride=5)
    ds[0]  # opens maps, which must not travel
    blob = pickle.dumps(ds)
    assert len(blob) < 2048
    again = pickle.loads(blob)
    assert torch.equal(again[4][0], ds[4][0]) and ds[1][0][5] == ds[0][0][10]
    batches = list(make_loader(ds, batch_size=4, shuffle=False))
    assert torch.equal(
        torch.cat([b[1] for b in batches]), ds.__getitems__(range(len(ds))).tensors[1]
    )
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(ValueError, match="too few"):
        TokenWindowDataset(windows_ds, block_size=10**9, split="val")


def test_document_dataset_and_eot_spans(tmp_path: Path) -> None:
    src = write_docs(tmp_path / "src", {"a.txt": b"ab", "b.txt": b"", "c.txt": b"cde"})
    run(src, tmp_path / "out", tokenizer="char", shard_mb=0.000001)
    docs = DocumentDataset(tmp_path / "out", split="train")
    assert [d.tolist() for d in docs] == [[0, 1], [], [2, 3, 4]]
    assert [docs.span(i) for i in range(3)] == [(0, 3), (3, 4), (4, 8)]
    assert stream(tmp_path / "out").tolist() == [0, 1, 5, 5, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="no 'val' documents"):
        DocumentDataset(tmp_path / "out", split="val")
    # Shards [a] and [b, c]: windows run over document ends (eot 5) and shard ends.
    windows = TokenWindowDataset(tmp_path / "out", block_size=3)
    assert len(read_manifest(tmp_path / "out").shards) == 2 and len(windows) == 2
    assert [[t.tolist() for t in windows[i]] for i in range(2)] == [
        [[0, 1, 5], [1, 5, 5]],
        [[5, 2, 3], [2, 3, 4]],
    ]


# ---------------------------------------------------------------- the run mechanics of pack

PREP = str(Path(sys.executable).with_name("prep"))


def rejects_of(folder: Path) -> list[dict[str, Any]]:
    raw = (folder / "rejects.jsonl").read_bytes()
    return [json.loads(line) for line in raw.decode("utf-8").splitlines()]


def temps(staging: Path) -> list[str]:
    return sorted(p.name for p in staging.rglob("*.tmp")) if staging.exists() else []


def test_rejects_file_sorted_with_undecodable_names(tmp_path: Path) -> None:
    src = write_docs(tmp_path / "src", {"good.txt": b"fine", "b.txt": b"b"})
    os.mkfifo(src / "a.txt")  # a listing reject: it comes first in the listing
    (src / os.fsdecode(b"0-\xff.txt")).write_bytes(b"bad \xc3(")  # a shard reject
    summary = run(src, tmp_path / "out", max_rejects=1)
    assert summary.rejected == 2
    raw = (tmp_path / "out" / "rejects.jsonl").read_bytes()
    assert "0-\\udcff.txt" in raw.decode("utf-8")  # valid UTF-8 whatever the file names
    rejects = rejects_of(tmp_path / "out")
    assert [(r["path"], r["reason"]) for r in rejects] == [
        (os.fsdecode(b"0-\xff.txt"), "utf8"),  # sorted by path, like prep pack's
        ("a.txt", "not_file"),
    ]


def _rlimit(max_bytes: int) -> Callable[[], None]:
    def limit() -> None:  # in the child: Python ignores SIGXFSZ, so a write fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_write_error_in_a_shard_is_one_line(tmp_path: Path, jobs: str) -> None:
    src = write_docs(tmp_path / "src", {f"{i}.txt": b"x" * 30_000 for i in range(2)})
    out = tmp_path / "out"
    args = [str(src), str(out), "--shard-mb", "0.01", "--val-fraction", "0", "-j", jobs, "-q"]
    p = subprocess.run(
        [PREP, "tokenize", *args],
        capture_output=True,
        text=True,
        preexec_fn=_rlimit(20_000),
        cwd=tmp_path,
        check=False,
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    temp = r"out\.partial/\.tokens-train-\d{5}\.npy\.[\w.-]+-\d+-[0-9a-f]{8}\.tmp"
    assert re.match(rf"error: cannot write .*{temp}: File too large\. HINT: ", p.stderr)
    staging = tmp_path / "out.partial"
    assert temps(staging) == [] and not out.exists()
    assert sorted(p.name for p in staging.iterdir()) == [RUN_DIR]  # nothing under a final name
    res = CliRunner().invoke(app, ["tokenize", *args, "--resume"])
    assert res.exit_code == 0, res.output
    assert decoded(out) == ["x" * 30_000] * 2


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("name", ["manifest.json", "rejects.jsonl"])
def test_write_error_when_finishing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = write_docs(tmp_path / "src", {"a.txt": b"a", "b.txt": b"b"})
    real = os.fsync

    def fsync(fd: int) -> None:  # a full disk, at the last writes of the run
        if name in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(
        PrepError,
        match=rf"cannot write .*/out\.partial/\.{re.escape(name)}\.[\w.-]+\.tmp: No space left on "
        r"device\. HINT: .*--resume",
    ):
        run(src, tmp_path / "out")
    assert temps(tmp_path / "out.partial") == [] and not (tmp_path / "out").exists()
    monkeypatch.undo()
    assert run(src, tmp_path / "out", resume=True).reused == 1
    assert decoded(tmp_path / "out") == ["a", "b"]


def test_resume_of_a_finished_dataset_and_out_a_file(tmp_path: Path) -> None:
    src = write_docs(tmp_path / "src", {"a.txt": b"one", "b.txt": b"two"})
    out = tmp_path / "out"
    first = run(src, out, tokenizer="char", shard_mb=0.000001)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = run(src, out, tokenizer="char", shard_mb=0.000001, resume=True)
    assert (again.docs, again.tokens, again.bytes) == (first.docs, first.tokens, first.bytes)
    assert again.shards == again.reused == first.shards == 2
    assert (again.tokenizer, again.vocab_size, again.dtype) == ("char", 6, "uint8")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # left as it is
    runner = CliRunner()
    args = ["tokenize", str(src), str(out), "-t", "char", "--shard-mb", "0.000001", "-q"]
    res = runner.invoke(app, [*args, "--val-fraction", "0", "--resume"])
    assert res.exit_code == 0, res.output  # the README: a complete dataset, exit 0
    assert "2 shards (2 reused)" in res.output
    with pytest.raises(PrepError, match=r"cannot resume .*out: it is complete.*HINT"):
        run(src, out, tokenizer="bytes", shard_mb=0.000001, resume=True)

    plain = tmp_path / "file"
    plain.write_text("not a dataset")
    for resume in (False, True):
        with pytest.raises(PrepError, match=r"file already exists and is not an empty folder"):
            run(src, plain, resume=resume)
    res = runner.invoke(app, ["tokenize", str(src), str(plain), "-q"])
    assert res.exit_code == 1 and res.output.startswith("error: ") and res.exception is not None
    assert isinstance(res.exception, SystemExit)  # a one-line error, not a traceback


SLOW_SHARD_HOOK = """
import os
if os.environ.get("PREP_TEST_SLOW_SHARD"):  # the shard tasks of this test wait before reading
    import time
    import prep.media.text.documents
    read = prep.media.text.documents.DocumentReader.read
    def slow(self, piece):
        time.sleep(float(os.environ["PREP_TEST_SLOW_SHARD"]))
        yield from read(self, piece)
    prep.media.text.documents.DocumentReader.read = slow
"""


def shard_temps(staging: Path) -> list[str]:
    return [n for n in temps(staging) if ".npy." in n]


def test_workers_end_with_a_killed_parent(tmp_path: Path) -> None:
    """SIGKILL of the parent alone: its loky workers stop mid-shard, so none of them can write
    (or rename into final names) beside the --resume run that follows."""
    src = write_docs(tmp_path / "src", {f"{i}.txt": b"doc %d " % i * 300 for i in range(4)})
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_SHARD_HOOK)
    out, staging = tmp_path / "out", tmp_path / "out.partial"
    args = ["tokenize", str(src), str(out), "--shard-mb", "0.001", "--val-fraction", "0", "-q"]
    path = os.pathsep.join(x for x in (str(hook), os.environ.get("PYTHONPATH")) if x)
    env = {**os.environ, "PYTHONPATH": path, "PREP_TEST_SLOW_SHARD": "60"}
    # Output to a file, not a pipe: the workers inherit it, and reading a pipe to its end would
    # wait for them.
    log = open(tmp_path / "log.txt", "wb")  # noqa: SIM115 - closed below
    p = subprocess.Popen(
        [PREP, *args, "-j", "2"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # its own process group: the parent and its workers
    )
    log.close()
    try:
        deadline = time.monotonic() + 120
        while p.poll() is None and not shard_temps(staging) and time.monotonic() < deadline:
            time.sleep(0.02)
        names = shard_temps(staging)  # the workers are in their shards, waiting before reading
        assert names and p.poll() is None, (tmp_path / "log.txt").read_text()
        pattern = r"\.(tokens(?:-offsets)?)-(train|val)-\d{5}\.npy\.[\w.-]+-(\d+)-[0-9a-f]{8}\.tmp"
        pids = {int(re.fullmatch(pattern, n)[3]) for n in names}  # type: ignore[index]
        assert p.pid not in pids  # written by the workers, under their own pid
        os.kill(p.pid, signal.SIGKILL)  # the parent only: its workers are orphaned
        p.wait()
        assert group_gone(p.pid, limit_s=20), "a worker outlived its parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    assert not list(staging.glob("*.npy"))  # nothing under a final name
    res = CliRunner().invoke(app, [*args, "-j", "1", "--resume"])
    assert res.exit_code == 0, res.output
    assert temps(out) == [] and decoded(out) == [(b"doc %d " % i * 300).decode() for i in range(4)]


# ---------------------------------------------------------------- listing and reject codes


def test_listing_rejects_like_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    for sub in ("sub", "locked", ".hidden"):
        (src / sub).mkdir(parents=True)
    write_docs(src, {"a.txt": b"a", "sub/b.txt": b"b", "locked/c.txt": b"c", "e.md": b"e"})
    write_docs(src, {".h.txt": b"h", ".hidden/f.txt": b"f"})  # hidden names: not inputs
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "d.txt").write_bytes(b"d")
    (src / "broken.txt").symlink_to(tmp_path / "nothing.txt")
    (src / "linked").symlink_to(tmp_path / "elsewhere")  # a folder link: followed
    (src / "sub" / "loop").symlink_to(src)  # the top folder again
    os.mkfifo(src / "fifo.txt")
    scandir = os.scandir

    def refuse_locked(path: Any = ".") -> Any:  # as chmod 000 would (root lists anything)
        if str(path).endswith("locked"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refuse_locked)
    pieces, rejects = list_text(src, split_lines=False)
    assert [p.rel for p in pieces] == ["a.txt", "linked/d.txt", "sub/b.txt"]
    assert {r["path"]: r["reason"] for r in rejects} == {
        "broken.txt": "broken_link",
        "fifo.txt": "not_file",
        "locked": "unreadable",
        "sub/loop": "link_loop",
    }
    assert [r["path"] for r in rejects] == sorted(r["path"] for r in rejects)


def test_every_tokenize_reject_code_is_in_the_readme() -> None:
    root = Path(__file__).resolve().parents[1]
    table = set(re.findall(r"^\| `(\w+)` \|", (root / "docs" / "rejects.md").read_text(), re.M))
    source = (root / "prep" / "media" / "text" / "documents.py").read_text()
    emitted = set(re.findall(r"(?:_reject|reject_record)\(\s*[\w.]+,\s*\"(\w+)\"", source))
    assert {"utf8", "json", "no_text", "too_long", "unreadable"} <= emitted  # the regex works
    # os_reject_code and check_file (prep.run.inputs) give the listing's codes, as for pack.
    emitted |= {"missing", "broken_link", "link_loop", "not_file"}
    assert emitted <= table, f"not in docs/rejects.md's reject codes: {sorted(emitted - table)}"


# ---------------------------------------------------------------- the encoders


def test_hf_encode_builds_ids_with_numpy_and_with_eot(monkeypatch: pytest.MonkeyPatch) -> None:
    import prep.media.text.tokenizers

    texts = ["alpha béta", "", "东京 🙂 alpha", "x", ""]
    tok = prep.media.text.tokenizers.fit_tokenizer("bpe", lambda: iter(texts * 5), 300)
    calls: list[int | None] = []
    real = prep.media.text.tokenizers.with_eot

    def spy(ids: np.ndarray, lengths: np.ndarray, eot: int | None) -> Any:
        calls.append(eot)
        return real(ids, lengths, eot)

    monkeypatch.setattr(prep.media.text.tokenizers, "with_eot", spy)
    ids, lengths = tok.encode(texts)
    assert calls == [tok.eot_id] and tok.eot_id is not None  # one eot insertion, shared
    runs = [tok._tok.encode(t, add_special_tokens=False).ids for t in texts]  # type: ignore[attr-defined]
    want = [i for r in runs for i in [*r, tok.eot_id]]
    assert ids.dtype == np.int64 and ids.tolist() == want
    assert lengths.dtype == np.int64 and lengths.tolist() == [len(r) + 1 for r in runs]
    empty_ids, empty_lengths = tok.encode([])
    assert empty_ids.size == 0 and empty_lengths.size == 0
