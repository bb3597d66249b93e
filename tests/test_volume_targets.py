"""prep volumes --targets: per-volume CSV targets packed, loaded back equal to the CSV (whole
volumes and patches), the same bytes for any --jobs, part of --resume, and every bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from manifests import edit_manifest
from test_volume_pack import cli, pack_volumes

from loaders import PatchDataset, VolumeDataset, load_manifest
from prep.demo.volumes import make_phantoms

# Rows out of order, named by path or by stem; class names, small ints, negative ints, floats.
CSV = """scan,grade,count,offset,dose
ct_002,low,3,-200,0.5
ct_000.nii.gz,high,0,7,1.25
./ct_001,low,255,-1,2.1
"""
EXPECTED = {  # scan -> (grade index into sorted [high, low], count, offset, dose)
    "ct_000.nii.gz": (0, 0, 7, 1.25),
    "ct_001.nii.gz": (1, 255, -1, 2.1),
    "ct_002.nii.gz": (1, 3, -200, 0.5),
}


@pytest.fixture(scope="module")
def scans(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("scans")
    make_phantoms(folder, count=3, seed=0, side=16, dicom=False)
    (folder / "targets.csv").write_text(CSV)
    return folder


@pytest.fixture(scope="module")
def packed(scans: Path) -> Path:
    out = scans / "packed"
    pack_volumes(scans / "images", out, labels=str(scans / "labels"),
                 targets=str(scans / "targets.csv"))  # fmt: skip
    return out


def test_targets_round_trip(packed: Path) -> None:
    ds = VolumeDataset(packed, fields=("image", "target"))
    arrays = ds.store.manifest.arrays
    dtypes = [arrays[f"volume_target_{j}"].dtype for j in range(4)]
    assert dtypes == ["uint8", "uint8", "int16", "float32"]  # 2.1 is not exact in float16
    entry = [ds.store.manifest.fields[f"volume_target_{j}"] for j in range(4)]
    assert [c["name"] for c in entry] == ["grade", "count", "offset", "dose"]
    assert entry[0]["vocab"] == ["high", "low"] and entry[1]["vocab"] is None
    for v in range(len(ds)):
        image, target = ds[v]
        assert image.shape[0] == 1 and target.dtype == torch.float32
        expected = EXPECTED[ds.meta(v)["path"]]
        assert target.tolist() == pytest.approx(expected, rel=1e-6)
    assert len(VolumeDataset(packed)[0]) == 2  # image, label: targets only when asked


def test_patches_carry_their_volume_target(packed: Path) -> None:
    ds = PatchDataset(packed, patch=(8, 8, 8), per_volume=2, fields=("target", "image", "label"))
    target, image, label = ds.__getitems__(list(range(len(ds)))).tensors
    assert target.shape == (6, 4) and image.shape == (6, 1, 8, 8, 8) == label.shape
    for i in range(len(ds)):
        expected = EXPECTED[ds.meta(i // 2)["path"]]
        assert target[i].tolist() == pytest.approx(expected, rel=1e-6)
    assert ds[3][0].tolist() == target[3].tolist()


def test_one_class_column(scans: Path, tmp_path: Path) -> None:
    """One column of class names: a 0-d int64 target per volume, the names as `classes`."""
    (tmp_path / "t.csv").write_text("path,site\nct_000,b\nct_001,a\nct_002,c\n")
    pack_volumes(scans / "images", tmp_path / "out", targets=str(tmp_path / "t.csv"))
    ds = VolumeDataset(tmp_path / "out", fields=("target",))
    assert ds.store.manifest.fields["volume_target_0"]["vocab"] == ["a", "b", "c"]
    assert [ds[v][0].item() for v in range(3)] == [1, 0, 2]
    assert ds[0][0].shape == () and ds[0][0].dtype == torch.int64


def test_same_bytes_any_jobs_and_resume(scans: Path, tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text(CSV)
    args = [str(scans / "images"), "--targets", str(csv), "--shard-size", "1"]
    for name, jobs in (("one", "1"), ("many", "2")):
        result = cli("volumes", args[0], str(tmp_path / name), *args[1:], "--jobs", jobs)
        assert result.exit_code == 0, result.output
    one, many = load_manifest(tmp_path / "one"), load_manifest(tmp_path / "many")
    assert [s.files for s in one.shards] == [s.files for s in many.shards]
    again = cli("volumes", args[0], str(tmp_path / "one"), *args[1:], "--resume")
    assert again.exit_code == 0, again.output
    csv.write_text(CSV.replace("0.5", "0.75"))  # another target: not the same run
    changed = cli("volumes", args[0], str(tmp_path / "one"), *args[1:], "--resume")
    assert changed.exit_code == 1 and "cannot resume" in changed.output, changed.output


def test_scan_without_row_is_a_reject(scans: Path, tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("scan,y\nct_000,1\nct_002,2\n")
    out = tmp_path / "out"
    pack_volumes(scans / "images", out, targets=str(tmp_path / "t.csv"), max_rejects=1.0)
    (reject,) = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert (reject["path"], reject["reason"]) == ("ct_001.nii.gz", "target_missing")
    ds = VolumeDataset(out, fields=("target",))
    assert [ds[v][0].item() for v in range(len(ds))] == [1, 2]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("scan,y\nct_000,1\nct_001,2\nct_002,3\nct_009,4\n", "line 5 names 'ct_009', no scan"),
        ("scan,y\nct_000,1\nct_001,2.5\nct_002,n/a\n", "line 4 has 'n/a' in column 'y'"),
        ("scan,y\nct_000,1\nct_001,2\nct_000.nii.gz,3\nct_002,4\n", "line 4 names scan 'ct_000'"),
        ("scan,y\nct_000,1\nct_001,\nct_002,3\n", "line 3 has no value in column 'y'"),
        ("scan,y\nct_000,1\nct_001,2,9\nct_002,3\n", "line 3 does not have the header's"),
        ("scan\nct_000\n", "one column"),
    ],
)
def test_bad_csv_is_one_error(scans: Path, tmp_path: Path, text: str, line: str) -> None:
    (tmp_path / "bad.csv").write_text(text)
    out = tmp_path / "out"
    result = cli("volumes", str(scans / "images"), str(out), "--targets", str(tmp_path / "bad.csv"))
    assert result.exit_code == 1, result.output
    assert "bad.csv" in result.output and line in result.output, result.output
    assert not out.exists()


def test_float16_when_exact(scans: Path, tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("scan,y\nct_000,0.5\nct_001,-3\nct_002,1e3\n")
    pack_volumes(scans / "images", tmp_path / "out", targets=str(tmp_path / "t.csv"))
    ds = VolumeDataset(tmp_path / "out", fields=("target",))
    assert ds.store.manifest.arrays["volume_target_0"].dtype == "float16"
    assert np.array_equal([ds[v][0].item() for v in range(3)], [0.5, -3.0, 1000.0])


def test_a_target_array_of_another_length_is_refused(packed: Path, tmp_path: Path) -> None:
    import shutil

    from loaders import FormatError

    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)

    def lose_one(manifest: dict[str, Any]) -> None:
        shard = manifest["shards"][0]
        name = shard["arrays"]["volume_target_1"]["file"]
        values = np.load(copy / name)
        np.save(copy / name, values[:-1])  # one volume's target lost
        shard["arrays"]["volume_target_1"]["length"] -= 1
        shard["files"][name]["bytes"] = (copy / name).stat().st_size

    edit_manifest(copy, lose_one)
    with pytest.raises(FormatError, match="array volume_target_1 has 2 samples, the shard 3"):
        VolumeDataset(copy)
