"""Volumes as a newcomer meets them (issue 24): volumes of several shapes in a loader, prep info's
per-volume shape and spacing, a tiny volume's preview, the hint for a folder of photos."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_volume_pack import cli, pack_volumes, write_nii

from loaders import PatchDataset, VolumeDataset, make_loader
from loaders.fields.volume import SLICE_MIN, middle_slices
from loaders.read.loader import collate_batch
from prep.inspect.preview import preview
from prep.inspect.report import info


@pytest.fixture(scope="module")
def two_shapes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tmp_path_factory.mktemp("vol")
    rng = np.random.default_rng(0)
    for name, shape, zoom in (("a", (4, 5, 7), 1.0), ("b", (6, 6, 6), 2.0)):
        data = rng.integers(0, 255, shape).astype(np.int16)
        write_nii(raw / "images" / f"{name}.nii.gz", data, np.diag([zoom, zoom, 2.5, 1.0]))
    pack_volumes(raw / "images", raw / "packed", dtype="uint8")
    return raw / "packed"


def test_volumes_of_several_shapes_say_so_in_a_loader(two_shapes: Path) -> None:
    ds = VolumeDataset(two_shapes)
    with pytest.raises(ValueError, match=r"volumes differ in shape .*--shape.*PatchDataset.*1"):
        make_loader(ds, batch_size=2)
    assert [b[0].shape[0] for b in make_loader(ds, batch_size=1)] == [1, 1]
    patches = PatchDataset(two_shapes, patch=(4, 4, 4), per_volume=2)
    assert next(iter(make_loader(patches, batch_size=4)))[0].shape == (4, 1, 4, 4, 4)
    with pytest.raises(ValueError, match=r"differ in shape .*batch_size=1"):  # a plain loader
        collate_batch([ds[0], ds[1]])


def test_info_shows_each_volume_shape_and_spacing(two_shapes: Path) -> None:
    text = info(two_shapes)
    assert "a.nii.gz" in text and "b.nii.gz" in text
    assert "4x5x7" in text and "6x6x6" in text
    assert "spacing 1x1x2.5 mm" in text and "spacing 2x2x2.5 mm" in text


def test_info_summarises_many_volumes(tmp_path: Path) -> None:
    for i in range(12):
        write_nii(tmp_path / "images" / f"v{i:02d}.nii.gz", np.zeros((3 + i % 2, 4, 5), np.int16))
    pack_volumes(tmp_path / "images", tmp_path / "packed", shard_size=6)
    text = info(tmp_path / "packed")
    assert "v00" not in text  # no line per volume
    assert "shapes (D x H x W): 3..4x4x5; 2 distinct" in text and "spacing (mm): 1x1x1" in text


def test_a_tiny_volume_fills_its_preview_tile(two_shapes: Path, tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    result = preview(two_shapes, count=2, output=out)
    assert result.size >= SLICE_MIN == 128
    vol = np.asarray(VolumeDataset(two_shapes).volume(0))  # 4x5x7
    planes = [np.take(vol, vol.shape[a] // 2, axis=a).T[::-1] for a in range(3)]
    k = -(-128 // 7)  # whole voxels: the longest side, 7, to at least 128 px
    for big, plane in zip(middle_slices(vol), planes, strict=True):
        assert np.array_equal(big, plane.repeat(k, 0).repeat(k, 1))  # each voxel a k x k block
    assert Image.open(out).size[0] >= 3 * 128


def test_volumes_on_photos_names_dicom_too(tmp_path: Path) -> None:
    (tmp_path / "photos").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "photos" / "a.jpg")
    r = cli("volumes", str(tmp_path / "photos"), str(tmp_path / "o"))
    assert r.exit_code == 1
    assert "DICOM" in r.output and "prep pack" in r.output
