"""Walking skeleton: pack then load, through the public API and the CLI."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from manifests import edit_manifest
from PIL import Image, ImageOps
from typer.testing import CliRunner

from loaders import ImageShardDataset, Normalize, make_loader
from loaders.format import read_manifest
from prep.cli.main import app
from prep.demo.images import CLASSES
from prep.media.image.decode import decode_image
from prep.media.image.geometry import geometry, place, resize


def test_round_trip_pixels_and_labels(packed: Path, raw_demo: Path) -> None:
    ds = ImageShardDataset(packed, size=96, fields=("image", "label"))
    manifest = read_manifest(packed)
    assert manifest.classes == sorted(CLASSES)
    files = sorted((raw_demo / "images").rglob("*.*"))
    assert len(ds) == len(files) == 24
    for i in (0, 7, 8, 23):  # shard edges
        image, label = ds[i]
        shard, local = divmod(i, 8)
        stored = np.load(packed / f"image_96-{shard:05d}.npy")[local]
        assert image.shape == (3, 96, 96) and image.dtype == torch.uint8
        assert np.array_equal(image.permute(1, 2, 0).numpy(), stored)
        assert manifest.classes[int(label)] == files[i].parent.name


def test_batch_is_channels_last_view(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("image", "label", "mask", "orig_size"))
    images, labels, masks, orig = ds.__getitems__([5, 17, 2]).tensors
    assert images.shape == (3, 3, 64, 64)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64 and masks.shape == (3, 64, 64) and orig.shape == (3, 2)
    singles = [ds[i] for i in (5, 17, 2)]
    assert all(torch.equal(images[j], singles[j][0]) for j in range(3))


def test_packed_image_close_to_reference_resize(packed: Path, raw_demo: Path) -> None:
    ds = ImageShardDataset(packed, size=96, fields=("image",))
    files = sorted((raw_demo / "images").rglob("*.*"))
    for i in (0, 5, 11):
        with Image.open(files[i]) as im:
            from PIL import ImageOps

            ref = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        g = geometry(ref.shape[0], ref.shape[1], 96, "fill")
        expected = place(resize(ref, g.content), g, 0)
        got = ds[i][0].permute(1, 2, 0).numpy()
        assert np.abs(got.astype(int) - expected.astype(int)).mean() < 3


def test_jobs_do_not_change_bytes(raw_demo: Path, tmp_path: Path, pack_to) -> None:
    for jobs in (1, 2):
        pack_to(raw_demo / "images", tmp_path / f"j{jobs}", sizes=[32], shard_size=5, jobs=jobs)
    a, b = sorted((tmp_path / "j1").iterdir()), sorted((tmp_path / "j2").iterdir())
    assert [p.name for p in a] == [p.name for p in b]
    for pa, pb in zip(a, b, strict=True):
        if pa.name == "manifest.json":  # equal but for the output path it records
            ja, jb = json.loads(pa.read_text()), json.loads(pb.read_text())
            assert ja["config"].pop("out") != jb["config"].pop("out")
            assert ja == jb
        else:
            assert pa.read_bytes() == pb.read_bytes(), pa.name


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_workers_same_samples(packed: Path, workers: int) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("image", "label"))
    loader = make_loader(ds, batch_size=5, shuffle=False, num_workers=workers)
    images = torch.cat([b[0] for b in loader])
    labels = torch.cat([b[1] for b in loader])
    ref = ds.__getitems__(list(range(len(ds)))).tensors
    assert torch.equal(images, ref[0]) and torch.equal(labels, ref[1])


def test_pickles_small(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64)
    ds[3]  # opens memory maps, which must not travel
    data = pickle.dumps(ds)
    assert len(data) < 1024  # the README's promise
    assert torch.equal(pickle.loads(data)[3][0], ds[3][0])


def test_normalize_pixel_units() -> None:
    x = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    y = Normalize([127.5] * 3, [127.5] * 3)(x)
    assert y.dtype == torch.float32 and torch.allclose(y, torch.ones_like(y))
    gray = Normalize([0.221 * 255], [0.242 * 255])(torch.zeros(1, 1, 2, 2, dtype=torch.uint8))
    assert torch.allclose(gray, torch.full_like(gray, -0.221 / 0.242))


def test_verify_catches_flipped_byte(packed: Path, copy_dataset) -> None:
    ds = copy_dataset(packed)
    runner = CliRunner()
    assert runner.invoke(app, ["verify", str(ds)]).exit_code == 0
    target = ds / "image_64-00001.npy"
    data = bytearray(target.read_bytes())
    data[500] ^= 0xFF
    target.write_bytes(bytes(data))
    result = runner.invoke(app, ["verify", str(ds)])
    assert result.exit_code == 1
    assert "image_64-00001.npy" in result.output and "checksum" in result.output
    assert result.output.strip().splitlines()[-1].startswith("error: 1 problems")


def test_cli_missing_src_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["pack", str(tmp_path / "nope"), str(tmp_path / "out")])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "nope does not exist" in lines[0]


def test_cli_non_empty_out_is_one_line(raw_demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = CliRunner().invoke(app, ["pack", str(raw_demo / "images"), str(out), "-q"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--overwrite" in lines[0]
    assert (out / "keep.txt").read_text() == "mine"


def test_cli_pack_info(raw_demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(
        app, ["resize", str(raw_demo / "images"), str(out), "--size", "48", "-j", "1", "-q"]
    )
    assert result.exit_code == 0, result.output
    assert "24 packed, 0 rejected" in result.output
    two = runner.invoke(
        app, ["resize", str(raw_demo / "images"), str(tmp_path / "o2"), "-s", "8,16"]
    )
    assert two.exit_code == 2 and "makes one size" in two.output
    result = runner.invoke(app, ["info", str(out), "--batch-size", "10"])
    assert "image_48" in result.output and "(48, 48, 3)" in result.output


def test_decode_respects_exif(raw_demo: Path) -> None:
    rotated = next(
        p
        for p in sorted((raw_demo / "images").rglob("*.jpg"))
        if Image.open(p).getexif().get(0x0112) == 6
    )  # stored sideways
    img, upright = decode_image(rotated)
    with Image.open(rotated) as im:
        w, h = im.size
        want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    assert upright == (w, h) and img.shape[:2] == (w, h)
    # The pixels, not only the shape: a rotation the wrong way round has the same shape.
    assert np.abs(img.astype(int) - want).mean() < 1.0
    assert np.abs(img.astype(int) - np.rot90(want, 2)).mean() > 10


def test_indices_are_checked(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("label",))
    assert torch.equal(ds[-1][0], ds[len(ds) - 1][0])
    with pytest.raises(IndexError, match="index 24 out of range"):
        ds.__getitems__([0, 24])
    with pytest.raises(TypeError, match="must be integers"):
        ds.__getitems__([1.5])


def test_shuffle_seed_mixes_classes_into_every_shard(raw_demo: Path, tmp_path: Path, pack_to):
    src = raw_demo / "images"
    pack_to(src, tmp_path / "sorted", sizes=[16], shard_size=6)
    pack_to(src, tmp_path / "a", sizes=[16], shard_size=6, shuffle_seed=3)
    pack_to(src, tmp_path / "b", sizes=[16], shard_size=6, shuffle_seed=3, jobs=2)
    for f in (tmp_path / "a").glob("*.npy"):
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes()  # deterministic

    def samples(root: Path) -> list[tuple[int, bytes]]:
        ds = ImageShardDataset(root, fields=("label", "image"))
        labels, images = ds.__getitems__(list(range(len(ds)))).tensors
        return [(int(la), im.numpy().tobytes()) for la, im in zip(labels, images, strict=True)]

    ordered, shuffled = samples(tmp_path / "sorted"), samples(tmp_path / "a")
    assert ordered != shuffled and sorted(ordered) == sorted(shuffled)  # same pairs, new order
    first_shard = {label for label, _ in shuffled[:6]}
    assert len(first_shard) > 1 and {label for label, _ in ordered[:6]} == {0}


def test_resume_refuses_changed_list_labels(raw_demo: Path, tmp_path: Path, pack_to) -> None:
    from prep import PrepError

    files = sorted((raw_demo / "images").rglob("*.jpg"))[:4]
    lst = tmp_path / "list.csv"
    rows = [f"{f},{lab}\n" for f, lab in zip(files, "dcdc", strict=True)] + ["nope.jpg,d\n"]
    lst.write_text("path,label\n" + "".join(rows))
    out = tmp_path / "ds"
    with pytest.raises(PrepError, match="inputs rejected"):  # the missing file: run kept
        pack_to(lst, out, sizes=[16], shard_size=2, max_rejects=0)
    lst.write_text(lst.read_text().replace(",d\n", ",x\n"))  # same files, other labels
    with pytest.raises(PrepError, match="input files changed"):
        pack_to(lst, out, sizes=[16], shard_size=2, max_rejects=0.5, resume=True)


def test_resume_of_a_finished_dataset(raw_demo: Path, tmp_path: Path, pack_to) -> None:
    from prep import PrepError

    src = tmp_path / "src"
    shutil.copytree(raw_demo / "images" / "circle", src / "circle")
    out = tmp_path / "ds"
    pack_to(src, out, sizes=[16])
    again = pack_to(src, out, sizes=[16], resume=True)  # done already: nothing to redo
    assert again.reused == again.shards == 1
    assert not (out / ".prep-run").exists()
    next(src.rglob("*.jpg")).unlink()
    with pytest.raises(PrepError, match="input files changed"):
        pack_to(src, out, sizes=[16], resume=True)


def test_a_held_batch_is_never_overwritten(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("image",))
    first = ds.__getitems__([0, 1]).tensors[0]
    view = first[1].numpy()  # a numpy view of one sample is a hold
    kept = view.copy()
    del first
    ds.__getitems__([5, 6])
    assert np.array_equal(view, kept)
    del view
    sent = ds.__getitems__([2, 3]).tensors[0]
    sent.share_memory_()  # what a multiprocessing queue does to a tensor it sends
    copy = sent.clone()
    # The receiving process's hold: its own mapping of the shared memory, which the pool
    # cannot count.
    fd, nbytes = sent.untyped_storage()._share_fd_cpu_()
    theirs = torch.UntypedStorage._new_shared_fd_cpu(os.dup(fd), nbytes)
    received = torch.empty(0, dtype=torch.uint8).set_(
        theirs, sent.storage_offset(), sent.shape, sent.stride()
    )
    del sent
    after = ds.__getitems__([7, 8]).tensors[0]
    assert not after.is_shared() and torch.equal(received, copy)  # samples 2 and 3 still
    del after
    pooled = {b.data_ptr() for bufs in ds._buffers._bufs.values() for b in bufs}
    assert ds.__getitems__([9, 10]).tensors[0].data_ptr() in pooled  # reused once let go


def test_workers_refuse_a_repacked_folder(packed: Path, copy_dataset) -> None:
    from loaders.format import FormatError

    root = copy_dataset(packed)
    ds = ImageShardDataset(root, size=64, fields=("label",))
    clone = pickle.loads(pickle.dumps(ds))  # what a spawned worker gets
    edit_manifest(root, lambda m: m["shards"].reverse())  # a repack: another order, same files
    with pytest.raises(FormatError, match="changed since the dataset was opened"):
        clone[0]
