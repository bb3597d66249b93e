"""JPEG-encoded and keep-mode shards (format version 2): packing, reading, crops, bad bytes."""

from __future__ import annotations

import io
import sys
import zlib
from pathlib import Path

import cv2
import manifests
import numpy as np
import pytest
import torch
from PIL import Image

import loaders.read.decode as decode
from loaders import CenterCrop, FormatError, ImageShardDataset, RandomResizedCrop, make_loader
from loaders.fields.checks import check_files
from loaders.format import read_manifest
from prep.media.image.geometry import geometry
from tests.conftest import run_pack


def _photos(root: Path, n: int = 6) -> Path:
    """Photo-like sources (smooth colour fields, blurred noise) of their own shapes, as PNG."""
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(n):
            h, w = 50 + 13 * i, 120 - 9 * i
            y, x = np.mgrid[0:h, 0:w] / max(h, w)
            base = np.stack([np.sin(3 * x + i), np.cos(4 * y), x * y], -1) * 100 + 120
            noise = cv2.GaussianBlur(rng.normal(0, 30, (h, w, 3)), (0, 0), 3)
            cv2.imwrite(str(root / c / f"{i}.png"), np.clip(base + noise, 0, 255).astype(np.uint8))
    return root


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _photos(tmp_path_factory.mktemp("photos") / "src")


@pytest.fixture(scope="module")
def keep(photos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mode keep at 32 (raw: ragged) and 48 px (jpeg), in shards of 5."""
    out = tmp_path_factory.mktemp("keep") / "ds"
    run_pack(photos, out, sizes=[48, 32], codec="jpeg,raw", mode="keep", shard_size=5)
    return out


def _images(root: Path, size: int, **kw: object) -> torch.Tensor:
    ds = ImageShardDataset(root, size=size, fields=("image",), **kw)  # type: ignore[arg-type]
    return ds.__getitems__(list(range(len(ds)))).tensors[0].float()


def test_round_trip_within_two_levels_of_the_raw_pack(photos: Path, tmp_path: Path) -> None:
    run_pack(photos, tmp_path / "raw", sizes=[32, 48])
    run_pack(photos, tmp_path / "q90", sizes=[32, 48], codec="jpeg")
    run_pack(photos, tmp_path / "q100", sizes=[48], codec="jpeg", quality=100)
    raw = _images(tmp_path / "raw", 48)
    # q90 is lossy: on average within 2 levels; q100 (4:4:4) within 2 levels at 99% of pixels.
    assert (_images(tmp_path / "q90", 48) - raw).abs().mean() <= 2
    assert (_images(tmp_path / "q100", 48) - raw).abs().quantile(0.99) <= 2
    q90 = read_manifest(tmp_path / "q90")
    assert q90.format_version == 4 and q90.fields["image"]["quality"] == 90
    disk = {p.name: p.stat().st_size for p in (tmp_path / "q90").iterdir()}
    assert sum(v for k, v in disk.items() if k.startswith("image_48")) < 48 * 48 * 3 * 12 / 4


def test_per_size_codecs_and_keep_shapes(keep: Path, photos: Path) -> None:
    m = read_manifest(keep)
    codecs = {name: spec.codec for name, spec in m.arrays.items()}
    assert codecs["image_48"] == "jpeg" and codecs["image_32"] == "ragged"
    assert codecs["label"] == "raw" and m.config["codec"] == "raw,jpeg"
    sources = sorted(photos.glob("*/*.png"))
    hw = np.concatenate([np.load(keep / f"image_hw_32-{i:05d}.npy") for i in range(len(m.shards))])
    want = [geometry(*cv2.imread(str(p)).shape[:2], 32, "keep").content for p in sources]
    assert hw.tolist() == [list(s) for s in want]
    # FORMAT.md: numpy and PIL alone read a sample of each codec.
    data, off = np.load(keep / "image_32-00000.npy"), np.load(keep / "image_32-offsets-00000.npy")
    pixels = data[off[1] : off[2]].reshape(*hw[1], 3)
    jdata, joff = np.load(keep / "image_48-00000.npy"), np.load(keep / "image_48-offsets-00000.npy")
    img = np.asarray(Image.open(io.BytesIO(jdata[joff[1] : joff[2]].tobytes())))
    assert max(img.shape[:2]) == 48 or img.shape[:2] == pixels.shape[:2]
    small = cv2.resize(img, pixels.shape[1::-1], interpolation=cv2.INTER_AREA)
    assert np.abs(small.astype(int) - pixels).mean() < 4
    with pytest.raises(ValueError, match=r"--mode keep.*crop="):
        ImageShardDataset(keep, size=32)
    batch = _images(keep, 48, crop=CenterCrop(24))
    assert batch.shape == (12, 3, 24, 24)
    with pytest.raises(Exception, match="--codec raw,jpeg,raw"):
        run_pack(photos, keep.parent / "bad", sizes=[32, 48], codec="raw,jpeg,raw")


def test_output_bytes_identical_for_any_jobs(photos: Path, tmp_path: Path) -> None:
    def files(out: Path) -> dict[str, str]:
        return {k: f.sha256 for s in read_manifest(out).shards for k, f in s.files.items()}

    for jobs in (1, 2):
        run_pack(photos, tmp_path / f"j{jobs}", sizes=[32, 40], codec="jpeg", mode="keep",
                 shard_size=4, jobs=jobs)  # fmt: skip
    assert files(tmp_path / "j1") == files(tmp_path / "j2") and len(files(tmp_path / "j1")) > 12


def test_same_crops_for_0_and_2_workers_and_per_epoch(keep: Path) -> None:
    crop = RandomResizedCrop(20, scale=(0.3, 1.0), seed=3)
    ds = ImageShardDataset(keep, size=48, fields=("image", "index"), crop=crop)
    ds.set_epoch(1)
    runs = [torch.cat([b[0] for b in make_loader(ds, batch_size=4, num_workers=w)]) for w in (0, 2)]
    assert runs[0].shape == (12, 3, 20, 20) and torch.equal(runs[0], runs[1])
    one = ds.__getitems__([7]).tensors[0]  # a sample's crop does not depend on its batch
    assert torch.equal(one[0], runs[0][7])
    ds.set_epoch(2)
    assert not torch.equal(ds.__getitems__(list(range(12))).tensors[0], runs[0])


def test_dct_reduced_decode_and_in_memory_compressed(keep: Path) -> None:
    disk = ImageShardDataset(keep, size=48, fields=("image", "label"), crop=CenterCrop(8, 1.0))
    ram = ImageShardDataset(keep, size=48, fields=("image", "label"), crop=CenterCrop(8, 1.0),
                            in_memory=True)  # fmt: skip
    idx = [11, 0, 6]
    for a, b in zip(disk.__getitems__(idx).tensors, ram.__getitems__(idx).tensors, strict=True):
        assert torch.equal(a, b)
    m = read_manifest(keep)  # RAM holds the JPEG bytes, not their pixels
    jpeg_bytes = sum(s.arrays["image_48"].length for s in m.shards)
    hw = np.concatenate([np.load(keep / f"image_hw_48-{i:05d}.npy") for i in range(len(m.shards))])
    assert ram._memory["image_48"].numel() == jpeg_bytes < hw.prod(axis=1).sum() * 3 / 2
    full = ImageShardDataset(keep, size=48, fields=("image",), crop=CenterCrop(48, 1.0))
    side = full.__getitems__([0]).tensors[0][0].permute(1, 2, 0).numpy()
    shrunk = cv2.resize(side, (8, 8), interpolation=cv2.INTER_AREA)  # 1/8 scale decode vs this
    got = disk.__getitems__([0]).tensors[0][0].permute(1, 2, 0).numpy()
    assert np.abs(shrunk.astype(int) - got).mean() < 6


def test_a_version_1_dataset_still_loads(packed: Path, copy_dataset) -> None:  # type: ignore[no-untyped-def]
    v1 = copy_dataset(packed)
    d = manifests.load(v1)  # version 4, its shards inline: made version 1's below
    d |= {"format_version": 1, "kind": "images", "classes": d["fields"]["label"]["classes"]}
    for key in ("fields", "command", "splits"):
        d.pop(key)
    d["extra"]["stats"] = d["extra"]["stats"]["image"]  # one image field's, as version 2 had
    new = ("source", "quality", "colour")  # a version-1 dataset has no sources, no quality
    for name in new:
        d["arrays"].pop(name, None)
    for spec in d["arrays"].values():
        spec.pop("codec")
    for shard in d["shards"]:
        for name in new:
            shard["arrays"].pop(name, None)
        for ref in shard["arrays"].values():
            ref.pop("offsets")
    manifests.save(v1, d)
    assert read_manifest(v1).format_version == 1 and not check_files(v1, read_manifest(v1))
    a = ImageShardDataset(v1, size=64, fields=("image", "mask", "label"))
    b = ImageShardDataset(packed, size=64, fields=("image", "mask", "label"))
    for x, y in zip(
        a.__getitems__([0, 9, 23]).tensors, b.__getitems__([0, 9, 23]).tensors, strict=True
    ):
        assert torch.equal(x, y)


def test_corrupted_jpeg_sample_is_a_format_error(keep: Path, copy_dataset) -> None:  # type: ignore[no-untyped-def]
    bad = copy_dataset(keep)
    off = np.load(bad / "image_48-offsets-00001.npy")
    data_file = bad / "image_48-00001.npy"
    header = data_file.stat().st_size - int(off[-1])
    with open(data_file, "r+b") as f:  # bit rot inside shard 1's sample 2
        f.seek(header + int(off[2]) + (off[3] - off[2]) // 2)
        f.write(b"\x55" * 16)
    ds = ImageShardDataset(bad, size=48, fields=("image",), crop=CenterCrop(24))
    ds.__getitems__([0, 1, 5])  # other samples read well
    with pytest.raises(FormatError, match=r"image_48-00001.npy \(shard 1, sample 2\).*checksum"):
        ds.__getitems__([0, 7])
    # A stream the decoder refuses, its checksum made to match: still an error, never grey.
    crc = np.load(bad / "image_crc_48-00001.npy", mmap_mode="r+")
    with open(data_file, "r+b") as f:
        f.seek(header + int(off[2]) + 200)
        f.write(b"\xff\xd9" * ((int(off[3] - off[2]) - 200) // 2))  # ends the stream early
        f.seek(header + int(off[2]))
        crc[2] = zlib.crc32(f.read(int(off[3] - off[2])))
    crc.flush()
    with pytest.raises(FormatError, match=r"shard 1, sample 2\).*cannot be decoded"):
        ds.__getitems__([7])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="decode='cuda' needs a CUDA GPU")
def test_cuda_decode_matches_the_cpu(keep: Path) -> None:
    pytest.importorskip("torchvision", reason="decode='cuda' needs the gpu extra (torchvision)")
    cpu = ImageShardDataset(keep, size=48, fields=("image",), crop=CenterCrop(32))
    gpu = ImageShardDataset(keep, size=48, fields=("image",), crop=CenterCrop(32), decode="cuda")
    a = cpu.__getitems__(list(range(12))).tensors[0].float()
    b = gpu.__getitems__(list(range(12))).tensors[0]
    assert b.is_cuda and b.shape == a.shape
    assert (b.float().cpu() - a).abs().mean() < 3


def test_pil_fallback_decodes_the_same(keep: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def batch() -> torch.Tensor:
        ds = ImageShardDataset(keep, size=48, fields=("image",), crop=CenterCrop(12, 1.0))
        return ds.__getitems__(list(range(12))).tensors[0]

    fast = batch()
    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # as if it were not installed
    monkeypatch.setattr(decode, "_roi", None)  # and loaders._jpegroi not built
    assert torch.equal(batch(), fast)  # one libjpeg-turbo underneath: the same pixels


needs_roi = pytest.mark.skipif(
    decode._roi is None, reason="loaders._jpegroi is not built (no C compiler or libjpeg headers)"
)


@needs_roi
@pytest.mark.parametrize("quality", [90, 100])  # 4:2:0 and 4:4:4 chroma
def test_a_box_decoded_alone_has_the_pixels_of_the_whole_decode(quality: int) -> None:
    import simplejpeg

    rng = np.random.default_rng(quality)
    y, x = np.mgrid[0:77, 0:101] / 100
    base = np.stack([np.sin(5 * x), np.cos(7 * y), x * y], -1) * 100 + 120
    img = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
    for channels, pixels in ((3, img), (1, np.ascontiguousarray(img[..., :1]))):
        sub = "444" if quality >= 95 else "420"
        data = np.frombuffer(
            simplejpeg.encode_jpeg(pixels, quality, "GRAY" if channels == 1 else "RGB", sub),
            np.uint8,
        )
        for f in (1, 2, 4):
            h, w = -(-77 // f), -(-101 // f)
            for _ in range(12):
                top, left = int(rng.integers(0, h - 1)), int(rng.integers(0, w - 1))
                rows, cols = int(rng.integers(1, h - top + 1)), int(rng.integers(1, w - left + 1))
                box = (top, left, rows, cols)
                alone = np.empty((rows, cols, channels), np.uint8)
                decode._roi.decode_box(data, alone, h, w, *box, f, channels)
                whole = decode.decode_jpeg(data, (77, 101), f, channels)
                assert np.array_equal(alone, whole[top : top + rows, left : left + cols]), box
                small = decode.decode_region(data, (77, 101), f, (0, 0, 2, 3), channels)
                assert np.array_equal(small, whole[:2, :3])  # decode_region takes it too
        out = np.empty((10, 5, channels), np.uint8)
        with pytest.raises(ValueError, match="inside the image"):
            decode._roi.decode_box(data, out, 77, 101, 70, 0, 10, 5, 1, channels)
        with pytest.raises(ValueError, match="stored"):
            decode._roi.decode_box(data, out, 76, 101, 0, 0, 10, 5, 1, channels)
        cut = np.concatenate([data[: len(data) // 2], np.frombuffer(b"\xff\xd9", np.uint8)])
        decode._roi.decode_box(cut, out, 77, 101, 0, 0, 10, 5, 1, channels)  # above the cut
        with pytest.raises(ValueError, match=r"(?i)premature end"):  # a warning is an error
            decode._roi.decode_box(cut, out, 77, 101, 67, 0, 10, 5, 1, channels)
