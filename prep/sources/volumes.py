"""Listing and reading the scans of `prep volumes`: NIfTI files (nibabel), DICOM series and their
labels. Every problem with one input is a `Reject` with a code of docs/rejects.md."""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prep.media.volume.dicom import read_series
from prep.media.volume.transform import MAX_CLASS
from prep.run.inputs import Reject, check_file, walk
from prep.sources.samples import file_stats

NIFTI = (".nii.gz", ".nii")
# What nibabel raises for a cut or damaged file: gzip streams that end early (EOFError), bad
# deflate data (zlib.error, gzip.BadGzipFile), arrays shorter than the header says (ValueError).
BROKEN = (EOFError, zlib.error, gzip.BadGzipFile, ValueError, OSError)


@dataclass(frozen=True)
class Item:
    rel: str  # path under SRC, posix
    path: Path
    label: Path | None = None
    target: tuple[int | float, ...] | None = None  # one value per --targets column


def stem(rel: str) -> str | None:
    """`ct/a.nii.gz` -> `ct/a`; None for a name that is not NIfTI."""
    low = rel.lower()
    return next((rel[: -len(ext)] for ext in NIFTI if low.endswith(ext)), None)


def list_volumes(
    src: Path, labels: Path | None
) -> tuple[list[Item], list[dict[str, Any]], list[tuple[str, int, int]]]:
    """Sorted NIfTI files and DICOM folders, rejects, and every file's (path, size, mtime)."""
    if src.is_file():
        problem = check_file(src, src.name)
        found, rejects = ([], [problem]) if problem else ([(src.name, src)], [])
    else:
        found, rejects = walk(src, frozenset({".nii", ".gz", ".dcm"}))
    items, seen = [], []
    found_labels = walk(labels, frozenset({".nii", ".gz"}))[0] if labels is not None else []
    label_files = {s: p for rel, p in found_labels if (s := stem(rel)) is not None}
    series: dict[str, list[Path]] = {}  # a DICOM series: the .dcm files of a folder
    inputs = []
    for rel, path in found:
        if rel.lower().endswith(".dcm"):
            series.setdefault(Path(rel).parent.as_posix(), []).append(path)
        elif stem(rel) is not None:  # not a .gz that is not .nii.gz
            inputs.append((rel, path, [path]))
    inputs += [(rel, files[0].parent, files) for rel, files in series.items()]
    for rel, path, files in sorted(inputs, key=lambda x: x[0]):
        rel = src.name if rel == "." else rel  # SRC is itself one DICOM series
        key, lab = stem(rel) or rel, None
        if labels is not None:  # a label file that is not there is rejected when read
            lab = label_files.get(key, labels / f"{key}.nii.gz")
        items.append(Item(rel, path, lab))
        seen += file_stats([p for p in (*files, lab) if p is not None and p.is_file()])
    return items, rejects, seen


@dataclass
class Scan:
    data: np.ndarray  # (X, Y, Z) as the file stores it, scaling applied
    affine: np.ndarray  # 4x4, voxel -> world mm


def read_scan(path: Path, volume_index: int | None, is_label: bool = False) -> Scan:
    """One volume: a NIfTI file, or a folder holding one DICOM series; or Reject."""
    if path.is_dir():
        data, affine = read_series(path)
    else:
        data, affine = _read_nifti(path, volume_index)
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        bad = int((~np.isfinite(data)).sum())
        raise Reject("not_finite", f"{bad} NaN or infinite voxels")
    if is_label:  # uint8 class ids: non-integer, negative or > 255 values are refused
        if data.size and (
            (data.dtype.kind == "f" and not np.array_equal(data, np.rint(data)))
            or data.min() < 0
            or data.max() > MAX_CLASS
        ):
            raise Reject("values", f"class ids must be integers 0..{MAX_CLASS}")
        data = data.astype(np.uint8)
    return Scan(np.ascontiguousarray(data), affine)


def _read_nifti(path: Path, volume_index: int | None) -> tuple[np.ndarray, np.ndarray]:
    import nibabel as nib

    if path.stat().st_size == 0:
        raise Reject("empty", "zero-byte file")
    try:
        img: Any = nib.load(path, mmap=False)
    except EOFError as e:  # a .nii.gz cut inside its header
        raise Reject("truncated", f"the file ends inside its header ({e})") from e
    except (nib.filebasedimages.ImageFileError, *BROKEN) as e:
        try:  # nibabel's sniffing hides why the header could not be read: a gzip stream cut?
            with gzip.open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
        except EOFError:
            raise Reject("truncated", "the gzip stream ends early, inside the header") from e
        except (OSError, zlib.error):
            pass
        raise Reject("not_volume", f"not a NIfTI file nibabel reads ({e})") from e
    shape = tuple(img.shape)
    while len(shape) > 3 and shape[-1] == 1:
        shape = shape[:-1]
    if len(shape) not in (3, 4):
        raise Reject("not_3d", f"{len(shape)}-D image {list(img.shape)}; a volume is 3-D")
    if len(shape) == 4 and volume_index is None:
        hint = "HINT: --volume-index N picks volume N of the 4th axis"
        raise Reject("not_3d", f"4-D image {list(shape)}; {hint}")
    if len(shape) == 4 and not 0 <= (volume_index or 0) < shape[3]:
        raise Reject("not_3d", f"--volume-index {volume_index} is outside the {shape[3]} volumes")
    try:
        if len(shape) == 4:
            data = np.asanyarray(img.dataobj[..., volume_index])
        else:
            data = np.asanyarray(img.dataobj).reshape(shape)
    except BROKEN as e:
        raise Reject("truncated", f"the voxel data ends early or is damaged ({e})") from e
    return data, np.asarray(img.affine, np.float64)


def read_pair(item: Item, volume_index: int | None) -> tuple[Scan, Scan | None]:
    """The image and its label volume (same shape and affine), or Reject (`label_<code>`)."""
    scan = read_scan(item.path, volume_index)
    if item.label is None:
        return scan, None
    if not item.label.is_file():
        raise Reject("label_missing", f"no label volume {item.label.name} in --labels")
    try:
        label = read_scan(item.label, volume_index, is_label=True)
    except Reject as r:
        raise Reject(f"label_{r.code}", f"label {item.label.name}: {r.message}") from r
    if label.data.shape != scan.data.shape:
        raise Reject(
            "label_shape", f"label is {list(label.data.shape)}, image {list(scan.data.shape)}"
        )
    if not np.allclose(label.affine, scan.affine, atol=1e-3):
        raise Reject("label_affine", "label and image affines differ (not the same grid)")
    return scan, label
