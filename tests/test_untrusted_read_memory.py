"""in_memory=True reads every field kind as the memory maps do: the same values, the same dtypes
(issue 34 item 1: ragged arrays came back as uint8 bytes, right shapes and wrong values), for
every policy, both sizes, crops, and a shuffled make_loader with and without workers."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import untrusted

import prep
from loaders import CenterCrop, ImageShardDataset, RandomResizedCrop, SampleDataset, make_loader
from loaders.fields import Tokens
from prep.fields import (
    Array,
    Boxes,
    Bytes,
    Image,
    Instances,
    Json,
    Keypoints,
    Label,
    Mask,
    Scalar,
    Text,
)

RNG = np.random.default_rng(3)
N = 9


def row(i: int) -> dict[str, Any]:
    """Sample i: every numeric dtype away from 0..255, so that a byte view cannot pass."""
    h, w = 30 + 4 * i, 40
    n = i % 4  # 0..3 boxes, and as many rows of each ragged Array (per box): sample 0 has none
    boxes = np.array([[2 + j, 3 + i, 20 + j, 25] for j in range(n)], np.float32).reshape(n, 4)
    stack = np.zeros((n, h, w), np.uint8)
    for j in range(n):
        stack[j, 3 + i : 25, 2 + j : 20 + j] = 1
    return {
        "img": (RNG.random((h, w, 3)) * 255).astype(np.uint8),
        "jpg": (RNG.random((h, w, 3)) * 255).astype(np.uint8),
        "m": np.full((h, w), 5 + i, np.uint8),
        "boxes": boxes + 0.25,
        "kp": np.full((n, 2, 3), [7.5, 9.25, 2], np.float32),
        "inst": stack,
        "vec": np.array([i + 0.5, -1e6, 3.25], np.float32),
        "rag": np.arange(2 * n, dtype=np.float64).reshape(n, 2) * 1e9 + 0.125 + i,
        "ids": np.arange(n, dtype=np.int64) * -(2**40) - i,
        "small": np.arange(n, dtype=np.int16) * -300 - i,
        "flags": np.arange(n) % 2 == i % 2,
        "s": -1.5 * i,
        "y": ["cat", "dog", "eel"][i % 3],
        "n": 70000 + i,
        "tok": np.arange(i, dtype=np.int64) * 100 + 255,
        "t": f"café {i}",
        "b": bytes([i, 0, 255, 7]),
        "j": {"i": i, "deep": [[i, None], "é"]},
    }


FIELDS: dict[str, Any] = {
    "img": Image(sizes=(16, 24), mode="fit"),
    "jpg": Image(sizes=(16, 24), codec="jpeg"),
    "m": Mask("img"),
    "boxes": Boxes("img"),
    "kp": Keypoints("img", joints=2),
    "inst": Instances("img"),
    "vec": Array("float32", (3,)),
    "rag": Array("float64", (None, 2)),
    "ids": Array("int64", (None,)),
    "small": Array("int16", (None,)),
    "flags": Array("bool", (None,)),
    "s": Scalar("float64"),
    "y": Label(("cat", "dog", "eel")),
    "n": Label(),
    "tok": Tokens(vocab_size=1200),
    "t": Text(),
    "b": Bytes(),
    "j": Json(),
}
KEEP = {
    "img": Image(sizes=(24,), mode="keep"),
    "jpg": Image(sizes=(24,), mode="keep", codec="jpeg"),
    "m": Mask("img"),
    "boxes": Boxes("img"),
    "kp": Keypoints("img", joints=2),
    "inst": Instances("img"),
    "rag": Array("float64", (None, 2)),
}


def pack(root: Path, fields: dict[str, Any]) -> Path:
    make = lambda i: {k: v for k, v in row(i).items() if k in fields}  # noqa: E731
    prep.pack_samples(make, range(N), root, fields, show_progress=False, jobs=1, shard_size=4)
    return root


@pytest.fixture(scope="module")
def fill(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack(tmp_path_factory.mktemp("mem") / "fill", FIELDS)


@pytest.fixture(scope="module")
def keep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack(tmp_path_factory.mktemp("mem") / "keep", KEEP)


def same(a: Any, b: Any, where: str) -> None:
    """`a` and `b` hold the same values of the same dtypes, whatever their nesting."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        if a.is_nested:
            same(list(a.unbind()), list(b.unbind()), where)
            return
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype)
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for j, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{j}]")
    else:
        assert a == b, where


def batches(ds: Any, workers: int = 0) -> list[Any]:
    loader = make_loader(ds, batch_size=4, shuffle=True, num_workers=workers, seed=5)
    return [b.tensors if hasattr(b, "tensors") else b for b in loader]


def test_the_maps_hold_what_was_packed(fill: Path) -> None:
    """The reference the in-memory reads are compared with is itself right (values from row())."""
    got = SampleDataset(fill, size=24, ragged="list").__getitems__(list(range(N)))
    for i in range(N):
        want = row(i)
        np.testing.assert_array_equal(got["vec"][i].numpy(), want["vec"])
        for name in ("rag", "ids", "small", "flags", "tok"):
            assert got[name][i].numpy().tolist() == want[name].tolist(), name
        assert got["tok"][i].dtype == torch.int64 and got["rag"][i].dtype == torch.float64
        assert got["small"][i].dtype == torch.int16 and got["flags"][i].dtype == torch.bool
        assert got["boxes"][i].shape == (i % 4, 4) and got["kp"][i].shape == (i % 4, 2, 3)
        assert got["inst"][i].shape == (i % 4, 24, 24)
    assert got["s"].tolist() == [-1.5 * i for i in range(N)] and got["s"].dtype == torch.float64
    assert got["y"].tolist() == [i % 3 for i in range(N)] and got["y"].dtype == torch.int64
    assert got["n"].tolist() == [70000 + i for i in range(N)] and got["n"].dtype == torch.int64
    assert got["t"] == [f"café {i}" for i in range(N)]
    assert got["b"] == [bytes([i, 0, 255, 7]) for i in range(N)]
    assert got["j"] == [{"i": i, "deep": [[i, None], "é"]} for i in range(N)]


@pytest.mark.parametrize("policy", ["pad", "list", "jagged"])
@pytest.mark.parametrize("size", [16, 24])
def test_every_field_kind_reads_the_same_in_memory(fill: Path, policy: str, size: int) -> None:
    fields = (*FIELDS, "index")
    maps = SampleDataset(fill, fields, size=size, ragged=policy)
    mem = SampleDataset(fill, fields, size=size, ragged=policy, in_memory=True)
    idx = [8, 0, 5, 3, 3, 1]
    same(mem.__getitems__(idx).tensors, maps.__getitems__(idx).tensors, f"{policy} {size}")
    mem.set_size(40 - size)  # every size went into memory: set_size still reads the copy
    maps.set_size(40 - size)
    same(mem.__getitems__(idx).tensors, maps.__getitems__(idx).tensors, "set_size")


def test_a_shuffled_loader_with_workers_reads_the_same_in_memory(fill: Path) -> None:
    fields = (*FIELDS, "index")
    maps = SampleDataset(fill, fields, size=24, crop=RandomResizedCrop(16, seed=1))
    mem = SampleDataset(fill, fields, size=24, crop=RandomResizedCrop(16, seed=1), in_memory=True)
    want = batches(maps)
    assert sorted(i for b in want for i in b["index"].tolist()) == list(range(N))
    same(batches(mem), want, "threads")
    same(batches(mem, workers=2), want, "workers")


@pytest.mark.parametrize("crop", [CenterCrop(16), RandomResizedCrop(16, seed=2)])
def test_keep_mode_fields_read_the_same_in_memory(keep: Path, crop: Any) -> None:
    maps = SampleDataset(keep, crop=crop)
    mem = SampleDataset(keep, crop=crop, in_memory=True)
    same(batches(mem), batches(maps), "keep")
    # Without a crop, instance masks of their own shapes come as a list
    fields = ("inst", "boxes", "rag")
    a, b = SampleDataset(keep, fields, in_memory=True), SampleDataset(keep, fields)
    same(a.__getitems__(range(N)).tensors, b.__getitems__(range(N)).tensors, "keep, no crop")


@pytest.mark.parametrize("options", [{}, {"codec": "jpeg"}, {"mode": "keep"}])
def test_image_datasets_read_the_same_in_memory(
    raw_demo: Path, pack_to: Any, tmp_path: Path, options: Any
) -> None:
    root = tmp_path / "ds"
    pack_to(raw_demo / "images", root, sizes=[32], masks=str(raw_demo / "masks"), **options)
    fields = ("image", "mask", "label", "orig_size", "index")
    crop = {"crop": CenterCrop(24)} if options.get("mode") == "keep" else {}
    maps = ImageShardDataset(root, fields=fields, **crop)
    mem = ImageShardDataset(root, fields=fields, in_memory=True, **crop)
    same(batches(mem), batches(maps), str(options))


def test_audio_clips_read_the_same_in_memory(tmp_path: Path) -> None:
    """Audio is a ragged int16 Array: the field the issue saw as bytes."""
    sf = pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    from prep.kinds.audio.config import AudioConfig
    from prep.kinds.audio.pack import audio

    (tmp_path / "src" / "a").mkdir(parents=True)
    for k in range(3):
        tone = 0.8 * np.sin(np.arange(1600 + 500 * k) * (0.05 + 0.02 * k))
        sf.write(tmp_path / "src" / "a" / f"{k}.wav", np.stack([tone, -tone], 1), 16000)
    cfg = AudioConfig(src=str(tmp_path / "src"), out=str(tmp_path / "ds"), jobs=1)
    audio(cfg, show_progress=False)
    maps, mem = SampleDataset(tmp_path / "ds"), SampleDataset(tmp_path / "ds", in_memory=True)
    want = maps.__getitems__([2, 0, 1])
    assert want["audio"].dtype == torch.int16 and int(want["audio"].abs().max()) > 20000
    same(mem.__getitems__([2, 0, 1]).tensors, want.tensors, "audio")


@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_video_fields_read_the_same_in_memory(tmp_path: Path, codec: str) -> None:
    pytest.importorskip("av")
    from prep.demo.video import make_video_demo
    from prep.kinds.video.config import VideoConfig
    from prep.kinds.video.pack import pack_video

    make_video_demo(tmp_path / "src", per_class=1, seed=0)
    opts = {"fps": 4.0, "size": 24, "jobs": 1, "codec": codec, "max_frames": 3}
    pack_video(VideoConfig(src=str(tmp_path / "src"), out=str(tmp_path / "ds"), **opts), False)
    maps = SampleDataset(tmp_path / "ds")
    mem = SampleDataset(tmp_path / "ds", in_memory=True)
    assert "source" in maps.fields and "frames" in maps.fields
    same(batches(mem), batches(maps), codec)


def test_one_split_reads_the_same_in_memory(fill: Path, tmp_path: Path) -> None:
    """The copy holds every shard; a split's indices map into it through its own shards."""
    root = shutil.copytree(fill, tmp_path / "split")

    def splits(m: dict[str, Any]) -> None:
        for k, shard in enumerate(m["shards"]):
            shard["split"] = "val" if k == 1 else "train"

    untrusted.edit_manifest(root, splits)
    for split, want in (("val", [4, 5, 6, 7]), ("train", [0, 1, 2, 3, 8])):
        fields = (*FIELDS, "index")
        maps = SampleDataset(root, fields, size=24, split=split)
        mem = SampleDataset(root, fields, size=24, split=split, in_memory=True)
        got = mem.__getitems__(range(len(want)))
        same(got.tensors, maps.__getitems__(range(len(want))).tensors, split)
        assert got["t"] == [f"café {i}" for i in want]
        same(batches(mem), batches(maps), split)
