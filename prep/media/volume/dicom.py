"""DICOM series (a folder of `.dcm` files, read with pydicom) as volumes: slices sorted along
the normal of ImageOrientationPatient, rescaled; more than one series, mixed grids, a missing
slice or uneven spacing is a reject. The affine maps (column, row, slice) to RAS mm, as NIfTI's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from prep.run.inputs import Reject

LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])  # DICOM's patient axes are L, P, S
GAP_TOLERANCE = 0.01  # of the slice spacing: scanners round positions to about a micron


def _grid(ds: Any) -> tuple[Any, ...]:
    """What every slice of one series shares: its series, orientation, size and pixel size."""
    try:
        return (
            str(ds.SeriesInstanceUID),
            tuple(round(float(v), 4) for v in ds.ImageOrientationPatient),
            int(ds.Rows),
            int(ds.Columns),
            tuple(round(float(v), 4) for v in ds.PixelSpacing),
        )
    except AttributeError as e:
        raise Reject("dicom_tags", f"a slice lacks a geometry tag ({e})") from e


def _order(slices: list[Any], normal: np.ndarray) -> tuple[np.ndarray, float]:
    """The slices' order along `normal` and their spacing; Reject unless evenly spaced."""
    pos = np.asarray(
        [float(np.dot(normal, [float(v) for v in s.ImagePositionPatient])) for s in slices]
    )
    order = np.argsort(pos, kind="stable")
    gaps = np.diff(pos[order])
    step = float(np.min(gaps))
    if step <= 1e-6:
        raise Reject("dicom_mixed", "two slices at one position: more than one series?")
    uneven = np.abs(gaps - step) > GAP_TOLERANCE * step
    if uneven.any():
        ratio = gaps / step
        if np.all(np.abs(ratio - np.rint(ratio)) <= GAP_TOLERANCE):
            missing = int(np.sum(np.rint(ratio) - 1))
            raise Reject("dicom_missing_slice", f"{missing} slice(s) missing in the series")
        raise Reject("dicom_spacing", f"uneven slice spacing {gaps.min():g}..{gaps.max():g} mm")
    return order, float(np.mean(gaps))


def read_series(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """(data as (columns, rows, slices) float32 in rescaled units, its RAS affine)."""
    import pydicom

    slices = []
    for path in sorted(p for p in folder.glob("[!.]*") if p.suffix.lower() == ".dcm"):
        try:
            slices.append(pydicom.dcmread(path))
        except (pydicom.errors.InvalidDicomError, EOFError, OSError, ValueError) as e:
            raise Reject("not_volume", f"{path.name} is not DICOM pydicom reads ({e})") from e
    grids = {_grid(s) for s in slices}
    if len(grids) > 1:
        series = len({g[0] for g in grids})
        what = f"{series} series" if series > 1 else "slices of different grids"
        raise Reject("dicom_mixed", f"{what} in one folder; one series per folder")
    if len(slices) < 2:
        raise Reject("not_3d", f"{len(slices)} slice: a volume needs two or more")
    _, cosines, _, _, (row_mm, col_mm) = grids.pop()
    row, col = np.asarray(cosines[:3]), np.asarray(cosines[3:])
    normal = np.cross(row, col)
    order, step = _order(slices, normal)
    planes = []
    for k in order.tolist():
        s = slices[k]
        try:
            pixels = s.pixel_array
        except (ValueError, AttributeError, OSError) as e:
            raise Reject("truncated", f"slice {k}: pixel data missing or short ({e})") from e
        slope, intercept = float(s.get("RescaleSlope", 1)), float(s.get("RescaleIntercept", 0))
        planes.append(pixels.astype(np.float32) * np.float32(slope) + np.float32(intercept))
    data = np.ascontiguousarray(np.stack(planes, axis=-1).transpose(1, 0, 2))
    lps = np.eye(4)
    lps[:3, 0], lps[:3, 1], lps[:3, 2] = row * col_mm, col * row_mm, normal * step
    lps[:3, 3] = [float(v) for v in slices[int(order[0])].ImagePositionPatient]
    return data, LPS_TO_RAS @ lps
