"""prep volumes: the offline steps against references, the geometry kept, bytes for any
--jobs, bad values, and every bad-input reject."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest
from scipy.ndimage import map_coordinates
from typer.testing import CliRunner

from loaders import FormatError, VolumeDataset, load_manifest
from prep.cli.main import app
from prep.demo.volumes import make_phantoms
from prep.kinds.volumes.config import VolumeConfig
from prep.kinds.volumes.pack import volumes
from prep.media.volume.transform import foreground_index

SIDE = 32


@pytest.fixture(scope="module")
def phantoms(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("phantoms")
    make_phantoms(folder, count=3, seed=0, side=SIDE, dicom=False)
    return folder


def pack_volumes(src: Path, out: Path, **options: Any) -> Any:
    options = {"jobs": 1, **options}
    return volumes(VolumeConfig(src=str(src), out=str(out), **options), show_progress=False)


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, [*args, "-q"])


def write_nii(path: Path, data: np.ndarray, affine: np.ndarray | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(data, np.diag([1.0, 1, 1, 1]) if affine is None else affine), path)
    return path


def world_to_source(meta: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    """The source voxel coordinates (3, N) of every stored voxel, through the two affines."""
    grid = np.indices(shape).reshape(3, -1)
    world = np.asarray(meta["affine"]) @ np.vstack([grid, np.ones(grid.shape[1])])
    return (np.linalg.inv(np.asarray(meta["source"]["affine"])) @ world)[:3]


def test_resample_matches_trilinear_and_nearest(phantoms: Path, tmp_path: Path) -> None:
    """Every stored voxel, mapped to the scan through the kept affines, equals scipy's
    trilinear interpolation there (within int16 rounding), and labels their nearest voxel."""
    out = tmp_path / "out"
    pack_volumes(phantoms / "images", out, labels=str(phantoms / "labels"), spacing="1.1,1.3,1.7")
    ds = VolumeDataset(out)
    for v in range(len(ds)):
        meta = ds.meta(v)
        image, label = (t[0].numpy() for t in ds[v])
        src = nib.load(phantoms / "images" / meta["path"])
        src_label = np.asarray(nib.load(phantoms / "labels" / meta["path"]).dataobj)
        coords = world_to_source(meta, image.shape)
        ref = map_coordinates(src.get_fdata(), coords, order=1, mode="nearest")
        assert np.abs(image.reshape(-1) - ref).max() <= 0.5 + 1e-3
        frac = np.abs(coords - np.round(coords)).max(axis=0)
        clear = frac < 0.49  # not on a tie between two voxels
        nearest = src_label[tuple(np.round(coords).astype(int))]
        assert clear.mean() > 0.5
        assert np.array_equal(label.reshape(-1)[clear], nearest[clear])
        assert meta["spacing"] == pytest.approx([1.1, 1.3, 1.7])
        assert meta["source"]["spacing"] == pytest.approx([0.8, 0.8, 2.5])


def test_orient_and_known_point(phantoms: Path, tmp_path: Path) -> None:
    """RAS: each axis increases toward R, A, S; the lesion's world centre is where the scan
    has it, after reorienting, windowing and cropping to the foreground."""
    out = tmp_path / "out"
    pack_volumes(
        phantoms / "images", out, labels=str(phantoms / "labels"), window="-1000,400",
        crop_foreground=True, margin=2,
    )  # fmt: skip
    ds = VolumeDataset(out)
    meta = ds.meta(0)
    affine = np.asarray(meta["affine"])
    assert np.all(np.diag(affine)[:3] > 0) and meta["direction"] == np.eye(3).tolist()
    src = nib.load(phantoms / "labels" / meta["path"])
    src_label = np.asarray(src.dataobj)
    label = ds[0][1][0].numpy()

    def lesion(found: np.ndarray, aff: np.ndarray) -> np.ndarray:
        return (aff @ [*np.argwhere(found == 2).mean(axis=0), 1])[:3]

    assert lesion(label, affine) == pytest.approx(lesion(src_label, src.affine), abs=1e-6)
    assert label.sum() == src_label.sum()  # the crop kept every labelled voxel
    assert ds[0][0].dtype.is_floating_point is False and int(ds[0][0].max()) <= 255


def test_int16_keeps_values_and_shape(phantoms: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    pack_volumes(phantoms / "images", out, orient="LPS", shape="20,40,9")
    ds = VolumeDataset(out, fields=("image",))
    src = np.asarray(nib.load(phantoms / "images" / ds.meta(0)["path"]).dataobj)
    (image,) = ds[0]
    assert image.dtype.itemsize == 2 and tuple(image.shape) == (1, 20, 40, 9)
    start = (np.asarray(src.shape) - [20, 40, 9]) // 2  # centre crop / pad, LPS is as stored
    assert np.array_equal(
        image[0, :, 4:36].numpy(), src[start[0] : start[0] + 20, :, start[2] : start[2] + 9]
    )
    assert np.all(image[0, :, :4].numpy() == src.min())  # padded with the volume's minimum


@pytest.mark.parametrize("jobs", [2])
def test_same_bytes_any_jobs_and_verify(phantoms: Path, tmp_path: Path, jobs: int) -> None:
    args = [str(phantoms / "images"), "--labels", str(phantoms / "labels"), "--shard-size", "1"]
    for name, j in (("one", 1), ("many", jobs)):
        result = cli("volumes", *args[:1], str(tmp_path / name), *args[1:], "--jobs", str(j))
        assert result.exit_code == 0, result.output
    one, many = load_manifest(tmp_path / "one"), load_manifest(tmp_path / "many")
    assert [s.files for s in one.shards] == [s.files for s in many.shards]
    assert len(one.shards) == 3 and one.num_samples == 3
    assert CliRunner().invoke(app, ["verify", str(tmp_path / "one")]).exit_code == 0
    info = CliRunner().invoke(app, ["info", str(tmp_path / "one")]).output
    assert "image (volume)" in info and "; 3 samples in 3 npy shards" in info


@pytest.mark.parametrize(
    "option",
    [
        ["--window", "400,-1000"],
        ["--orient", "RAX"],
        ["--spacing", "1,2"],
        ["--spacing", "0,1,1"],
        ["--dtype", "float64"],
        ["--shape", "10,0,10"],
        ["--window", "0,1", "--dtype", "float16"],
    ],
)
def test_bad_values_exit_2(phantoms: Path, tmp_path: Path, option: list[str]) -> None:
    result = cli("volumes", str(phantoms / "images"), str(tmp_path / "out"), *option)
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "out").exists()


def test_foreground_index_per_class() -> None:
    label = np.zeros((6, 5, 4), np.uint8)
    label[1, 2, 3] = 2
    label[4, :, :] = 1
    voxels, bounds = foreground_index(label, per_class=7)
    assert bounds[:3].tolist() == [0, 7, 8] and bounds[-1] == 8
    assert np.all(label.reshape(-1)[voxels[:7]] == 1)
    assert label.reshape(-1)[voxels[7]] == 2


def _bad_inputs(src: Path, labels: Path) -> dict[str, str]:
    """One scan per bad case (and its label): the reject code each must give."""
    good = np.zeros((8, 8, 8), np.int16)
    for name in ("ok", "nan", "four_d", "label_shape", "label_affine", "label_missing", "cut"):
        data: np.ndarray = good
        if name == "nan":
            data = np.full((8, 8, 8), np.nan, np.float32)
        if name == "cut":  # noise: the gzip stream stays long enough to cut its data
            data = np.random.default_rng(0).integers(-999, 999, (8, 8, 8), dtype=np.int16)
        if name == "four_d":
            data = np.zeros((8, 8, 8, 2), np.int16)
        write_nii(src / f"{name}.nii.gz", data)
        if name == "label_missing":
            continue
        lab = np.zeros((8, 8, 7) if name == "label_shape" else data.shape[:3], np.uint8)
        affine = np.diag([2.0, 1, 1, 1]) if name == "label_affine" else None
        write_nii(labels / f"{name}.nii.gz", lab, affine)
    whole = (src / "cut.nii.gz").read_bytes()
    (src / "cut.nii.gz").write_bytes(whole[: len(whole) // 2])
    (src / "empty.nii").write_bytes(b"")
    (src / "text.nii").write_bytes(b"not a scan " * 100)
    write_nii(src / "huge.nii.gz", np.full((4, 4, 4), 1e6, np.float32))
    write_nii(labels / "huge.nii.gz", np.zeros((4, 4, 4), np.uint8))
    write_nii(src / "classes.nii.gz", good)
    write_nii(labels / "classes.nii.gz", np.full((8, 8, 8), 0.5, np.float32))
    return {
        "nan.nii.gz": "not_finite",
        "four_d.nii.gz": "not_3d",
        "label_shape.nii.gz": "label_shape",
        "label_affine.nii.gz": "label_affine",
        "label_missing.nii.gz": "label_missing",
        "cut.nii.gz": "truncated",
        "empty.nii": "empty",
        "text.nii": "not_volume",
        "huge.nii.gz": "out_of_range",
        "classes.nii.gz": "label_values",
    }


def test_bad_inputs_are_rejects(tmp_path: Path) -> None:
    src, labels = tmp_path / "src", tmp_path / "labels"
    expected = _bad_inputs(src, labels)
    out = tmp_path / "out"
    summary = pack_volumes(src, out, labels=str(labels), max_rejects=1.0)
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert {r["path"]: r["reason"] for r in lines} == expected
    assert summary.packed == 1 and VolumeDataset(out).meta(0)["path"] == "ok.nii.gz"
    again = pack_volumes(src, tmp_path / "again", labels=str(labels), max_rejects=1.0,
                         volume_index=1)  # fmt: skip
    rejected = {r["path"] for r in map(json.loads, (tmp_path / "again" / "rejects.jsonl").open())}
    assert "four_d.nii.gz" not in rejected and again.packed == 2


def test_tampered_offsets_are_refused(phantoms: Path, tmp_path: Path) -> None:
    """A shard whose voxel offsets do not step by its volumes' shapes is refused on open."""
    out = tmp_path / "out"
    pack_volumes(phantoms / "images", out, labels=str(phantoms / "labels"))
    offsets = np.load(out / "image-offsets-00000.npy")
    offsets[1] += 1
    np.save(out / "image-offsets-00000.npy", offsets)  # same size: only the check sees it
    with pytest.raises(FormatError, match="the offsets of image do not step"):
        VolumeDataset(out)


def test_demo_and_preview(tmp_path: Path) -> None:
    """`prep demo --volumes` is deterministic and packs without rejects (its DICOM series
    too); preview draws three middle slices per volume."""
    for name in ("a", "b"):
        assert cli("demo", "--volumes", str(tmp_path / name)).exit_code == 0
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.*"))
    assert len(files) == 4 + 33 + 5  # 4 NIfTI scans, a 33-slice DICOM series, 5 labels
    assert all(
        (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files
    )
    args = ["--labels", str(tmp_path / "a" / "labels"), "--window", "-1000,400"]
    assert (
        cli("volumes", str(tmp_path / "a" / "images"), str(tmp_path / "out"), *args).exit_code == 0
    )
    assert VolumeDataset(tmp_path / "out").store.manifest.rejects == 0
    sheet = tmp_path / "sheet.png"
    result = CliRunner().invoke(app, ["preview", str(tmp_path / "out"), "-o", str(sheet)])
    assert result.exit_code == 0 and "3x5 tiles" in result.output, result.output
