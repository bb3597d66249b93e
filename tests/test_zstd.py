"""--compress zstd: shards of masks, pixels, tokens and text in zstd chunks with a chunk index.
Every read path returns what the raw pack returns; numpy + zstandard alone read the files as
FORMAT.md says; a damaged chunk index or frame is one FormatError line."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from s3server import http_server
from typer.testing import CliRunner

import prep.run.shardwriter
from loaders import (
    DocumentDataset,
    ImageShardDataset,
    RandomResizedCrop,
    TokenWindowDataset,
    make_loader,
)
from loaders.format import FormatError, kept
from prep.cli.main import app

zstandard = pytest.importorskip("zstandard")
FIELDS = ("image", "mask", "label")


@pytest.fixture(scope="module")
def packs(raw_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The demo with masks, raw and compressed (chunks of 4 KiB: several a shard), shards of 8."""
    from conftest import run_pack

    root = tmp_path_factory.mktemp("zstd")
    opts: dict[str, Any] = dict(sizes=[32], masks=str(raw_demo / "masks"), shard_size=8)
    run_pack(raw_demo / "images", root / "raw", **opts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prep.run.shardwriter, "CHUNK_BYTES", 4096)
        run_pack(raw_demo / "images", root / "zstd", compress="zstd", compress_level=5, **opts)
    return root / "raw", root / "zstd"


def numpy_read(root: Path, array: str, shard: int, stem: str) -> np.ndarray:
    """FORMAT.md's recipe: a compressed array of one shard with numpy and zstandard alone."""
    m = json.loads((root / "manifest.json").read_text())
    spec, columns = m["arrays"][array], m["index"]["columns"]
    length = int(np.load(root / "shards.npy")[columns.index(f"length:{array}"), shard])
    payload = np.load(root / f"{array}-{stem}.npy")
    n = math.ceil(length / spec["chunk"])
    starts = payload[len(payload) - 8 * (n + 1) :].view("<i8")
    dec = zstandard.ZstdDecompressor()
    frames = [dec.decompress(payload[a:b].tobytes()) for a, b in itertools.pairwise(starts)]
    flat = np.frombuffer(b"".join(frames), spec["dtype"])
    return flat if spec["codec"] == "ragged" else flat.reshape(-1, *spec["shape"])


def same(a: Any, b: Any) -> None:
    """Equal batches: Batch objects, tuples, lists and dicts of tensors, all the way down."""
    a, b = getattr(a, "tensors", a), getattr(b, "tensors", b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        a, b = list(a.values()), list(b.values())
    if isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif torch.is_tensor(a):
        assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        assert a == b


def test_compressed_pack_is_smaller_and_numpy_reads_it(packs: tuple[Path, Path]) -> None:
    raw, packed = packs
    m = json.loads((packed / "manifest.json").read_text())
    zipped = {n for n, a in m["arrays"].items() if a.get("compress") == "zstd"}
    assert zipped == {"image_32", "mask_32", "source"}  # labels, hashes, offsets stay raw
    assert m["arrays"]["mask_32"]["chunk"] == 4  # 4096 bytes of 32x32 masks
    for array in sorted(zipped):
        raw_files = sorted(raw.glob(f"{array}-0*.npy"))
        assert len(raw_files) == 3
        for task, f in enumerate(raw_files):
            assert np.array_equal(numpy_read(packed, array, task, f"{task:05d}"), np.load(f))
    size = {p: sum(f.stat().st_size for f in p.glob("mask_32-*.npy")) for p in packs}
    assert size[packed] < size[raw] / 4  # masks: flat regions of a few class ids


def test_every_read_path_equals_the_raw_pack(packs: tuple[Path, Path]) -> None:
    raw, packed = packs
    a = ImageShardDataset(raw, size=32, fields=FIELDS)
    b = ImageShardDataset(packed, size=32, fields=FIELDS)
    order = [23, 0, 9, 8, 7, 15, 16, 3]  # across shards and chunks, out of order
    same(a.__getitems__(order), b.__getitems__(order))
    for i in range(len(a)):
        same(a[i], b[i])
        assert a.source(i) == b.source(i)  # the source text field, read through its chunks
    ram = ImageShardDataset(packed, size=32, fields=FIELDS, in_memory=True)
    same(a.__getitems__(order), ram.__getitems__(order))
    crop = dict(crop=RandomResizedCrop(16, seed=1))  # crops of the pixels and masks
    same(
        ImageShardDataset(raw, size=32, fields=FIELDS[:2], **crop).__getitems__(order),
        ImageShardDataset(packed, size=32, fields=FIELDS[:2], **crop).__getitems__(order),
    )


def test_workers_read_the_compressed_pack_as_the_raw_one(packs: tuple[Path, Path]) -> None:
    raw, packed = packs
    want = list(make_loader(ImageShardDataset(raw, size=32, fields=FIELDS), batch_size=5))
    loader = make_loader(
        ImageShardDataset(packed, size=32, fields=FIELDS), batch_size=5, num_workers=2
    )
    for _epoch in range(2):
        for x, y in zip(want, loader, strict=True):
            same(x, y)


def test_a_read_in_order_decompresses_its_whole_chunks_at_once(
    packs: tuple[Path, Path], tmp_path: Path
) -> None:
    """Batches in order cover runs of whole chunks (one call of the decompressor a run): the
    raw pack's masks, on 1 or 2 reading threads (shuffled too, through the kept chunks); a bad
    frame in a run is named."""
    raw, packed = packs
    runs = itertools.product((8, 11, 5), (1, 2))  # 8: a shard's 2 chunks; 5: shuffled
    for batch, threads in runs:  # 2 threads shuffled: the kept chunks filled by both
        opts: dict[str, Any] = dict(batch_size=batch, shuffle=batch == 5, seed=3)
        want = make_loader(ImageShardDataset(raw, size=32, fields=("mask",)), **opts)
        ds = ImageShardDataset(packed, size=32, fields=("mask",))
        same(list(want), list(make_loader(ds, threads=threads, **opts)))
    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)
    path = copy / "mask_32-00000.npy"
    payload, data = np.load(path), bytearray(path.read_bytes())
    starts = payload[len(payload) - 24 :].view("<i8")  # 2 chunks: 3 frame starts
    data[len(data) - len(payload) + int(starts[2]) - 1] ^= 0xFF  # chunk 1's checksum
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"mask_32-00000.npy: chunk 1 cannot be decompressed"):
        ImageShardDataset(copy, size=32, fields=("mask",)).__getitems__(list(range(8)))


def test_a_compressed_pack_reads_from_a_url(packs: tuple[Path, Path], tmp_path: Path) -> None:
    raw, packed = packs
    with http_server(packed) as (url, _):
        remote = ImageShardDataset(url, size=32, fields=FIELDS, cache_dir=tmp_path)
        local = ImageShardDataset(raw, size=32, fields=FIELDS)
        same(local.__getitems__(list(range(24))), remote.__getitems__(list(range(24))))
        assert [remote.source(i) for i in range(24)] == [local.source(i) for i in range(24)]


def corpus(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(7):
        (src / f"d{i}.txt").write_text(f"document {i} says " + "abcab " * (i * 9 + 20))
    return src


@pytest.fixture
def token_packs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A char-tokenized corpus, raw and compressed in chunks of 64 tokens (in this process)."""
    src, runner = corpus(tmp_path), CliRunner()
    monkeypatch.setattr(prep.run.shardwriter, "CHUNK_BYTES", 64)
    for name, more in (("raw", []), ("zstd", ["--compress", "zstd", "--compress-level", "9"])):
        args = ["tokenize", str(src), str(tmp_path / name), "-t", "char", "-q", "-j", "1"]
        args += ["--val-fraction", "0"]
        res = runner.invoke(app, [*args, "--backend", "threads", *more])
        assert res.exit_code == 0, res.output
    yield tmp_path / "raw", tmp_path / "zstd"


def test_masks_default_to_their_own_level(
    raw_demo: Path, packs: tuple[Path, Path], tmp_path: Path
) -> None:
    """No --compress-level: masks at 13 (their runs decode faster), the pixels at 3; a level
    given is every array's (the `packs` fixture's 5)."""
    from conftest import run_pack

    opts: dict[str, Any] = dict(sizes=[32], masks=str(raw_demo / "masks"), shard_size=8)
    run_pack(raw_demo / "images", tmp_path / "z", compress="zstd", **opts)
    levels = {
        root.name: {n: a["level"] for n, a in manifest(root)["arrays"].items() if "level" in a}
        for root in (tmp_path / "z", packs[1])
    }
    assert levels["z"] == {"mask_32": 13, "image_32": 3, "source": 3}
    assert set(levels["zstd"].values()) == {5}
    raw = packs[0]
    masks = numpy_read(tmp_path / "z", "mask_32", 0, "00000")
    assert np.array_equal(masks, np.load(raw / "mask_32-00000.npy"))


def manifest(root: Path) -> dict[str, Any]:
    return json.loads((root / "manifest.json").read_text())


def test_tokens_read_the_same_compressed(token_packs: tuple[Path, Path]) -> None:
    raw, packed = token_packs
    m = json.loads((packed / "manifest.json").read_text())
    assert {n for n, a in m["arrays"].items() if a.get("compress")} == {"tokens", "source"}
    assert m["arrays"]["tokens"]["level"] == 9
    tokens = np.load(raw / "tokens-train-00000.npy")
    assert len(tokens) > 4 * 64  # several chunks
    assert np.array_equal(numpy_read(packed, "tokens", 0, "train-00000"), tokens)
    for block, stride in ((16, None), (100, 7)):  # windows across chunk bounds
        a = TokenWindowDataset(raw, block_size=block, stride=stride)
        b = TokenWindowDataset(packed, block_size=block, stride=stride)
        assert len(a) == len(b) > 10
        idx = list(range(len(a)))[::-1]
        same(a.__getitems__(idx), b.__getitems__(idx))
    docs = DocumentDataset(raw, split="train"), DocumentDataset(packed, split="train")
    assert len(docs[0]) == len(docs[1]) == 7
    for i in range(7):
        assert torch.equal(docs[0][i], docs[1][i])
    assert CliRunner().invoke(app, ["verify", str(packed)]).exit_code == 0


def test_a_damaged_chunk_index_or_frame_is_one_line(
    token_packs: tuple[Path, Path], tmp_path: Path
) -> None:
    _, packed = token_packs
    path = packed / "tokens-train-00000.npy"
    good = path.read_bytes()
    end = len(good)
    bad = bytearray(good)
    bad[end - 16 : end - 8] = (10**6).to_bytes(8, "little")  # a frame start past the end
    path.write_bytes(bytes(bad))
    with pytest.raises(FormatError, match=r"tokens-train-00000.npy: its chunk index is not"):
        TokenWindowDataset(packed, block_size=16)
    res = CliRunner().invoke(app, ["verify", str(packed)])
    assert res.exit_code == 1 and "tokens-train-00000.npy checksum differs" in res.output
    assert "Traceback" not in res.output
    bad = bytearray(good)
    bad[200:210] = b"\xff" * 10  # inside the first frames: found when that chunk is read
    path.write_bytes(bytes(bad))
    ds = TokenWindowDataset(packed, block_size=16)
    with pytest.raises(FormatError, match=r"tokens-train-00000.npy: chunk \d+ "):
        ds.__getitems__(list(range(len(ds))))
    assert not kept.KEPT.filling  # the slots reserved for the chunks after it are free again


@pytest.mark.parametrize(
    ("more", "said"),
    [
        (["--compress", "lz4"], "--compress 'lz4'"),
        (["--compress", "zstd", "--compress-level", "30"], "--compress-level 30"),
        (["--compress", "zstd", "--format", "h5"], "--compress zstd is for npy shards"),
    ],
)
def test_bad_compress_options_are_one_line(
    raw_demo: Path, tmp_path: Path, more: list[str], said: str
) -> None:
    res = CliRunner().invoke(app, ["pack", str(raw_demo / "images"), str(tmp_path / "o"), *more])
    assert res.exit_code == 2 and said in res.output and "Traceback" not in res.output
