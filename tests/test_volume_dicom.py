"""DICOM series: the same volume and geometry as the NIfTI of the same scan, and each broken
series (missing slice, mixed series, uneven spacing) a reject."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pydicom
import pytest
from test_volume_pack import pack_volumes, write_nii

from loaders import VolumeDataset
from prep.demo.volumes import lps_affine, phantom, write_series


@pytest.fixture(scope="module")
def scan(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, np.ndarray]:
    shape = (20, 16, 8)
    img, _ = phantom(shape, np.random.default_rng(5))
    return img, lps_affine(shape)


def rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["path"]: r["reason"] for r in map(json.loads, lines)}


def test_series_equals_its_nifti(scan: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    img, affine = scan
    write_series(tmp_path / "dcm" / "a", img, affine, seed=0)
    write_nii(tmp_path / "nii" / "a.nii.gz", img, affine)
    for spacing in (None, "1,1,1"):
        for src in ("dcm", "nii"):
            pack_volumes(tmp_path / src, tmp_path / f"{src}-{spacing}", spacing=spacing)
        dcm, nii = (
            VolumeDataset(tmp_path / f"dcm-{spacing}"),
            VolumeDataset(tmp_path / f"nii-{spacing}"),
        )
        assert dcm.meta(0)["path"] == "a"
        # NIfTI keeps its affine as float32 (0.800000012 mm): resampled values differ by
        # that rounding only; without resampling they are equal.
        diff = dcm[0][0].numpy().astype(int) - nii[0][0].numpy()
        assert np.abs(diff).max() <= (0 if spacing is None else 1)
        assert np.allclose(dcm.meta(0)["affine"], nii.meta(0)["affine"], atol=1e-4)
        assert np.allclose(dcm.meta(0)["source"]["affine"], affine, atol=1e-4)


def test_broken_series_are_rejects(scan: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    img, affine = scan
    src = tmp_path / "src"
    for name, seed in (("ok", 0), ("missing", 1), ("mixed", 2), ("uneven", 3), ("other", 4)):
        write_series(src / name, img, affine, seed)
    (src / "missing" / "slice_003.dcm").unlink()
    shutil.copy(src / "other" / "slice_000.dcm", src / "mixed" / "slice_900.dcm")
    shutil.rmtree(src / "other")
    ds = pydicom.dcmread(src / "uneven" / "slice_004.dcm")
    ds.ImagePositionPatient = [
        *ds.ImagePositionPatient[:2],
        float(ds.ImagePositionPatient[2]) + 0.7,
    ]
    ds.save_as(src / "uneven" / "slice_004.dcm")
    (src / "junk").mkdir()
    (src / "junk" / "a.dcm").write_bytes(b"x" * 300)
    summary = pack_volumes(src, tmp_path / "out", max_rejects=1.0)
    assert rejects(tmp_path / "out") == {
        "missing": "dicom_missing_slice",
        "mixed": "dicom_mixed",
        "uneven": "dicom_spacing",
        "junk": "not_volume",
    }
    assert summary.packed == 1
