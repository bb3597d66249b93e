"""Multi-resolution packing, grayscale, modes, masks, list sources and HDF5 shards."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from loaders import ImageShardDataset, make_loader
from loaders.format import read_manifest
from prep.inspect.report import info
from prep.media.image.geometry import geometry, place, resize

SIZES = [16, 32]
BOX = (8, 20, 40, 52)  # top, left, bottom, right of the class-2 square in every synthetic image


@pytest.fixture(scope="session")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six 48x64 images (two classes) with a square of known place and its mask of class ids."""
    root = tmp_path_factory.mktemp("shapes")
    rng = np.random.default_rng(7)
    for i in range(6):
        cls = ("a", "b")[i % 2]
        img = rng.integers(0, 60, (48, 64, 3), dtype=np.uint8)
        mask = np.zeros((48, 64), np.uint8)
        top, left, bottom, right = BOX
        img[top:bottom, left:right] = (250, 20, 20)
        mask[top:bottom, left:right] = 2
        mask[40:, :] = 1  # a floor band
        for sub, arr in (("images", img), ("masks", mask)):
            (root / sub / cls).mkdir(parents=True, exist_ok=True)
            Image.fromarray(arr).save(root / sub / cls / f"{i}.png")
    return root


COMBOS = list(itertools.product(["rgb", "gray"], ["fill", "fit", "stretch"], ["npy", "h5"]))


@pytest.mark.parametrize(("color", "mode", "fmt"), COMBOS)
def test_round_trip_every_combination(shapes: Path, tmp_path: Path, pack_to, color, mode, fmt):
    out = tmp_path / "ds"
    pack_to(
        shapes / "images",
        out,
        sizes=SIZES,
        mode=mode,
        gray=color == "gray",
        masks=str(shapes / "masks"),
        format=fmt,
        shard_size=4,
        pad_value=7,
    )
    m = read_manifest(out)
    assert m.storage == fmt and m.sizes() == SIZES and m.classes == ["a", "b"]
    channels = 1 if color == "gray" else 3
    for size in SIZES:
        ds = ImageShardDataset(out, size=size, fields=("image", "mask", "label", "orig_size"))
        images, masks, labels, orig = ds.__getitems__(list(range(len(ds)))).tensors
        assert images.shape == (6, channels, size, size)
        assert labels.tolist() == [0, 0, 0, 1, 1, 1]  # sorted: a/0 a/2 a/4 b/1 b/3 b/5
        assert orig.tolist() == [[48, 64]] * 6
        assert set(masks.unique().tolist()) <= {0, 1, 2}  # class ids only, never blended
        g = geometry(48, 64, size, mode)
        scale_y, scale_x = g.content[0] / 48, g.content[1] / 64
        off_y = (g.content[0] - size) // 2 if mode == "fill" else -((size - g.content[0]) // 2)
        off_x = (g.content[1] - size) // 2 if mode == "fill" else -((size - g.content[1]) // 2)
        # The centre of the square, mapped through resize and crop/pad, is class 2 and red.
        cy = round((BOX[0] + BOX[2]) / 2 * scale_y) - off_y
        cx = round((BOX[1] + BOX[3]) / 2 * scale_x) - off_x
        assert (masks[:, cy, cx] == 2).all()
        expected = 250 if color == "rgb" else 0.299 * 250 + 0.587 * 20 + 0.114 * 20  # luma
        assert ((images[:, 0, cy, cx].float() - expected).abs() < 12).all()
        if mode == "fit":  # padding: pad value in images, 0 in masks
            assert (images[:, :, 0, 0] == 7).all() and (masks[:, 0, 0] == 0).all()


def test_multi_size_equals_single_and_reference(raw_demo: Path, tmp_path: Path, pack_to) -> None:
    """Every size of a multi-size pack against a pack of that size alone and against a direct
    resize of the upright source. The largest is the same bytes; each smaller one is made from
    the next larger (sizes_from), which differs from its own decode by about a level."""
    src = raw_demo / "images"
    sizes = [32, 64, 128]
    pack_to(src, tmp_path / "multi", sizes=sizes, shard_size=24)
    for size in sizes:
        pack_to(src, tmp_path / f"single{size}", sizes=[size], shard_size=24)
    files = sorted(src.rglob("*.*"))
    refs = []
    for f in files:
        with Image.open(f) as im:
            refs.append(np.asarray(ImageOps.exif_transpose(im).convert("RGB")))
    for size in sizes:
        multi = np.load(tmp_path / "multi" / f"image_{size}-00000.npy")
        single = np.load(tmp_path / f"single{size}" / f"image_{size}-00000.npy")
        assert multi.shape == single.shape == (len(files), size, size, 3)
        if size == max(sizes):
            assert np.array_equal(multi, single)
        to_single = np.abs(multi.astype(int) - single.astype(int)).mean(axis=(1, 2, 3))
        assert to_single.max() < 3 and to_single.mean() < 1.5, (size, to_single)
        for i, ref in enumerate(refs):
            g = geometry(ref.shape[0], ref.shape[1], size, "fill")
            direct = place(resize(ref, g.content), g, 0).astype(int)
            assert np.abs(multi[i].astype(int) - direct).mean() < 3, (size, files[i].name)
    for name in ("label", "orig_size"):  # the other arrays do not depend on the sizes
        a = (tmp_path / "multi" / f"{name}-00000.npy").read_bytes()
        assert all(a == (tmp_path / f"single{s}" / f"{name}-00000.npy").read_bytes() for s in sizes)


def test_set_size_reaches_persistent_workers(shapes: Path, tmp_path: Path, pack_to) -> None:
    out = tmp_path / "ds"
    pack_to(shapes / "images", out, sizes=SIZES, shard_size=4)
    ds = ImageShardDataset(out, size=16, fields=("image",))
    loader = make_loader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    assert {b[0].shape[-1] for b in loader} == {16}
    ds.set_size(32)
    assert {b[0].shape[-1] for b in loader} == {32}
    ds.set_size(16)
    assert {b[0].shape[-1] for b in loader} == {16}


def test_missing_field_or_size_lists_what_exists(packed: Path) -> None:
    with pytest.raises(ValueError, match=r"no size 512; it has \[64, 96\]"):
        ImageShardDataset(packed, size=512)
    with pytest.raises(ValueError, match=r"no field \['depth'\]; it has \["):
        ImageShardDataset(packed, size=64, fields=("image", "depth"))
    ds = ImageShardDataset(packed, size=64)
    with pytest.raises(ValueError, match="no size 100"):
        ds.set_size(100)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_list_sources(shapes: Path, tmp_path: Path, pack_to, kind: str) -> None:
    rows = [
        {"path": f"images/{c}/{i}.png", "label": c, "mask": f"masks/{c}/{i}.png"}
        for i, c in [(3, "b"), (0, "a"), (1, "b")]
    ]
    lst = shapes / f"list.{kind}"
    if kind == "csv":
        lst.write_text(
            "path,label,mask\n" + "".join(f"{r['path']},{r['label']},{r['mask']}\n" for r in rows)
        )
    else:
        lst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "ds"
    pack_to(lst, out, sizes=[16])
    ds = ImageShardDataset(out, size=16, fields=("label", "mask"))
    labels, masks = ds.__getitems__([0, 1, 2]).tensors
    assert read_manifest(out).classes == ["a", "b"]
    assert labels.tolist() == [1, 0, 1]  # list order kept, names map to sorted classes
    assert masks.max() == 2


def test_integer_labels_in_a_list(shapes: Path, tmp_path: Path, pack_to) -> None:
    lst = shapes / "ints.csv"
    lst.write_text("path,label\nimages/a/0.png,300\nimages/b/1.png,5\n")
    out = tmp_path / "ds"
    pack_to(lst, out, sizes=[16])
    m = read_manifest(out)
    assert m.classes is None and m.arrays["label"].dtype == "uint16"  # 300 > 255
    assert ImageShardDataset(out, size=16, fields=("label",)).__getitems__([0, 1]).tensors[
        0
    ].tolist() == [300, 5]


def test_h5_shards_are_identical_for_any_jobs(shapes: Path, tmp_path: Path, pack_to) -> None:
    for jobs in (1, 2):
        pack_to(
            shapes / "images",
            tmp_path / f"j{jobs}",
            sizes=SIZES,
            format="h5",
            shard_size=2,
            jobs=jobs,
        )
    for f in sorted((tmp_path / "j1").glob("*.h5")):
        assert f.read_bytes() == (tmp_path / "j2" / f.name).read_bytes(), f.name


def test_h5_is_readable_with_h5py_alone(shapes: Path, tmp_path: Path, pack_to) -> None:
    import h5py

    out = tmp_path / "ds"
    pack_to(shapes / "images", out, sizes=SIZES, format="h5", shard_size=4)
    with h5py.File(out / "shard-00000.h5", "r") as f:
        direct = f["image_32"][:]
        assert f["image_32"].chunks is None and f["image_32"].compression is None
    ds = ImageShardDataset(out, size=32, fields=("image",))
    got = ds.__getitems__([0, 1, 2, 3]).tensors[0].permute(0, 2, 3, 1).numpy()
    assert np.array_equal(got, direct)


def test_info_shows_sizes_and_batch_ram(packed: Path) -> None:
    text = info(packed, batch_size=10)
    assert "image_64" in text and "image_96" in text and "mask_96" in text
    # The article's arithmetic: size x size x channels x batch.
    assert f"{96 * 96 * 3 * 10 / 1e6:,.1f} MB" in text
    assert "total on disk" in text


def test_grayscale_is_one_channel_luma(shapes: Path, tmp_path: Path, pack_to) -> None:
    out = tmp_path / "g"
    pack_to(shapes / "images", out, sizes=[32], gray=True, mode="stretch")
    rgb_out = tmp_path / "c"
    pack_to(shapes / "images", rgb_out, sizes=[32], mode="stretch")
    gray = ImageShardDataset(out, fields=("image",))[0][0]
    rgb = ImageShardDataset(rgb_out, fields=("image",))[0][0].float()
    luma = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    assert gray.shape == (1, 32, 32)
    assert (gray[0].float() - luma).abs().mean() < 2
    assert torch.is_tensor(gray)
