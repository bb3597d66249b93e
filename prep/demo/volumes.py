"""`prep demo --volumes DIR`: CT-like phantoms (int16 HU, voxels of 0.8 x 0.8 x 2.5 mm stored LPS:
`--orient RAS` flips two axes) as DIR/images/ct_NNN.nii.gz, one more as a DICOM series
(DIR/images/ct_dicom/), their labels (1 a liver-like organ, 2 a lesion) in DIR/labels/."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prep.media.volume.dicom import LPS_TO_RAS

SPACING = (0.8, 0.8, 2.5)


def _ellipsoid(grid: list[np.ndarray], centre: np.ndarray, radii: np.ndarray) -> np.ndarray:
    return sum(((g - c) / r) ** 2 for g, c, r in zip(grid, centre, radii, strict=True)) <= 1


def phantom(shape: tuple[int, int, int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(int16 HU image, uint8 label) of `shape`, features placed at random within the body."""
    grid = list(np.ogrid[tuple(slice(0, n) for n in shape)])
    n = np.asarray(shape, np.float64)
    img = np.full(shape, -1000.0, np.float32)
    body = _ellipsoid(grid, n / 2, n * [0.42, 0.36, 0.46])
    img[body] = 40
    img[body & ~_ellipsoid(grid, n / 2, n * [0.38, 0.32, 0.46])] = 700  # the ribs' ring
    for side in (-1, 1):
        centre = n * [0.5 + side * 0.17, 0.5, 0.6]
        img[_ellipsoid(grid, centre, n * [0.12, 0.15, 0.2])] = -800
    label = np.zeros(shape, np.uint8)
    liver = n * [0.5 + rng.uniform(-0.05, 0.05), 0.45, 0.3 + rng.uniform(-0.04, 0.04)]
    organ = _ellipsoid(grid, liver, n * [0.2, 0.14, 0.14])
    lesion = _ellipsoid(
        grid, liver + n * [0.06, 0, 0], np.maximum(n * rng.uniform(0.05, 0.08), 1.5)
    )
    label[organ], label[lesion & organ] = 1, 2
    img[organ], img[lesion & organ] = 60, 110
    img += rng.normal(0, 12, shape).astype(np.float32) * body
    return np.rint(img).astype(np.int16), label


def lps_affine(shape: tuple[int, int, int]) -> np.ndarray:
    """Voxel -> RAS world mm for an array stored LPS (as DICOM is), centred on the origin."""
    affine = np.diag([-SPACING[0], -SPACING[1], SPACING[2], 1.0])
    affine[:3, 3] = -affine[:3, :3] @ (np.asarray(shape) / 2)
    return affine


def write_series(folder: Path, data: np.ndarray, affine: np.ndarray, seed: int) -> None:
    """`data` (columns, rows, slices; int16 HU) on RAS `affine` as the demo's CT series."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

    folder.mkdir(parents=True, exist_ok=True)
    lps = np.linalg.inv(LPS_TO_RAS) @ affine
    spacing = np.linalg.norm(lps[:3, :3], axis=0)
    cosines = (lps[:3, :2] / spacing[:2]).T.reshape(-1)
    series = generate_uid(entropy_srcs=[f"prep-demo-series-{seed}"])
    for k in range(data.shape[2]):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = CTImageStorage
        meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[series, str(k)])
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = Dataset()
        ds.file_meta = meta
        ds.SOPClassUID, ds.SOPInstanceUID = CTImageStorage, meta.MediaStorageSOPInstanceUID
        ds.StudyInstanceUID = generate_uid(entropy_srcs=[series, "study"])
        ds.SeriesInstanceUID, ds.Modality, ds.InstanceNumber = series, "CT", k + 1
        ds.ImageOrientationPatient = [round(float(v), 6) for v in cosines]
        ds.ImagePositionPatient = [round(float(v), 4) for v in lps[:3, 3] + k * lps[:3, 2]]
        ds.PixelSpacing = [round(float(spacing[1]), 4), round(float(spacing[0]), 4)]
        ds.SliceThickness = round(float(spacing[2]), 4)
        ds.Rows, ds.Columns = data.shape[1], data.shape[0]
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
        ds.RescaleSlope, ds.RescaleIntercept = 1, -1024
        ds.PixelData = (data[:, :, k].T.astype(np.int32) + 1024).astype("<u2").tobytes()
        ds.save_as(folder / f"slice_{k:03d}.dcm", enforce_file_format=True)


def make_phantoms(
    folder: Path, count: int = 4, seed: int = 0, side: int = 64, dicom: bool = True
) -> list[Path]:
    """`count` NIfTI phantoms of about `side` voxels a side (fewer along z: 2.5 mm slices), and
    with `dicom` one more as a DICOM series; the written inputs, labels included."""
    import nibabel as nib

    (folder / "images").mkdir(parents=True, exist_ok=True)
    (folder / "labels").mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(count + dicom):
        rng = np.random.default_rng([seed, i])
        shape = (side + 4 * (i % 3), side, max(8, side * 2 // 5) + 2 * i)
        img, label = phantom(shape, rng)
        affine = lps_affine(shape)
        name = f"ct_{i:03d}" if i < count else "ct_dicom"
        pairs = [("labels", label)] + ([("images", img)] if i < count else [])
        if i == count:
            write_series(folder / "images" / name, img, affine, seed)
            written.append(folder / "images" / name)
        for sub, data in pairs:
            path = folder / sub / f"{name}.nii.gz"
            nii = nib.Nifti1Image(data, affine)
            nii.header.set_xyzt_units("mm")
            nib.save(nii, path)
            written.append(path)
    return written
