"""The offline steps of `prep volumes`, pure functions on a C-order array (axis k toward letter k
of its orientation code, RAS...) and its 4x4 voxel-to-mm affine: every step returns the new
array with its grid's affine, so a stored voxel maps to the same world point as in the scan."""

from __future__ import annotations

import numpy as np

from prep.run.inputs import Reject

# Foreground sampling needs a few thousand voxels a class (nnU-Net keeps 10,000), not all.
FG_PER_CLASS = 10_000
MAX_CLASS = 255  # labels are stored as uint8 class ids
FG_BOUNDS = MAX_CLASS + 1  # fg_offsets per volume: class c lies in [row[c - 1], row[c])
STORED = {"int16": (-32768, 32767), "uint8": (0, 255), "float16": (-65504.0, 65504.0)}
AXIS_PAIRS = ("RL", "AP", "SI")


def check_orient(code: str) -> bool:
    """Whether `code` is three letters naming each axis pair once: RAS, LPS, PIR ..."""
    pairs = sorted(next((p for p in AXIS_PAIRS if c in p), "?") for c in code.upper())
    return len(code) == 3 and pairs == sorted(AXIS_PAIRS)


def spacing_of(affine: np.ndarray) -> np.ndarray:
    """Voxel size (mm) along each array axis: the lengths of the affine's columns."""
    return np.linalg.norm(affine[:3, :3], axis=0)


def reorient(data: np.ndarray, affine: np.ndarray, code: str) -> tuple[np.ndarray, np.ndarray]:
    """`data` flipped and transposed so axis k increases toward letter k of `code`."""
    import nibabel.orientations as nio

    now = nio.io_orientation(affine)
    change = nio.ornt_transform(now, nio.axcodes2ornt(tuple(code.upper())))
    out = np.ascontiguousarray(nio.apply_orientation(data, change))
    return out, affine @ nio.inv_ornt_aff(change, data.shape)


def _resample_axis(x: np.ndarray, axis: int, step: float, linear: bool) -> np.ndarray:
    """Samples at old positions 0, step, 2 step ... along `axis` (all inside the old grid)."""
    n = x.shape[axis]
    count = int(np.floor((n - 1) / step + 1e-6)) + 1
    pos = np.arange(count) * step
    if not linear or n == 1:
        return np.take(x, np.minimum(np.floor(pos + 0.5).astype(np.int64), n - 1), axis=axis)
    lo = np.minimum(np.floor(pos).astype(np.int64), n - 2)
    shape = [1] * x.ndim
    shape[axis] = count
    w = (pos - lo).astype(np.float32).reshape(shape)
    return np.take(x, lo, axis=axis) * (1 - w) + np.take(x, lo + 1, axis=axis) * w


def resample(
    data: np.ndarray, affine: np.ndarray, spacing: tuple[float, ...], linear: bool
) -> tuple[np.ndarray, np.ndarray]:
    """`data` on a grid of `spacing` mm, same first voxel: trilinear (float32) or nearest."""
    steps = np.asarray(spacing, np.float64) / spacing_of(affine)
    out = data.astype(np.float32) if linear else data
    for axis, step in enumerate(steps):
        if abs(step - 1) > 1e-9:
            out = _resample_axis(out, axis, float(step), linear)
    return np.ascontiguousarray(out), affine @ np.diag([*steps, 1.0])


def to_stored(data: np.ndarray, dtype: str, window: tuple[float, float] | None) -> np.ndarray:
    """Intensities as stored: a window scales [lo, hi] to uint8; else rounded, must fit `dtype`."""
    if window is not None:
        lo, hi = window
        scaled = (data.astype(np.float32) - lo) * np.float32(255 / (hi - lo))
        return np.rint(np.clip(scaled, 0, 255)).astype(np.uint8)
    values = data if dtype == "float16" else np.rint(data)
    bottom, top = STORED[dtype]
    low, high = float(values.min()), float(values.max())
    if low < bottom or high > top:
        raise Reject(
            "out_of_range",
            f"values {low:g}..{high:g} do not fit {dtype} ({bottom:g}..{top:g}); "
            "HINT: --window LO,HI to store uint8, or another --dtype",
        )
    return values.astype(dtype)


def box(data: np.ndarray, start: np.ndarray, size: tuple[int, ...], pad: float) -> np.ndarray:
    """The box of `size` voxels from `start` (may lie partly outside): the rest is `pad`."""
    out = np.full(size, pad, data.dtype)
    src, dst = [], []
    for a, (s, n) in enumerate(zip(start.tolist(), size, strict=True)):
        lo, hi = max(s, 0), min(s + n, data.shape[a])
        src.append(slice(lo, max(lo, hi)))
        dst.append(slice(lo - s, lo - s + max(0, hi - lo)))
    out[tuple(dst)] = data[tuple(src)]
    return out


def translate(affine: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The affine of a grid whose voxel 0 is voxel `start` of `affine`'s grid."""
    shift = np.eye(4)
    shift[:3, 3] = start
    return affine @ shift


def foreground_box(image: np.ndarray, label: np.ndarray | None, margin: int) -> np.ndarray:
    """(2, 3) (start, stop) of the voxels above the lowest value or labelled, plus `margin`."""
    mask = image > image.min()
    if label is not None:
        mask |= label > 0
    shape = np.asarray(image.shape)
    if not mask.any():
        return np.stack([np.zeros(3, np.int64), shape])
    hits = [np.flatnonzero(mask.any(axis=tuple(b for b in range(3) if b != a))) for a in range(3)]
    lo, hi = np.array([h[0] for h in hits]), np.array([h[-1] + 1 for h in hits])
    return np.stack([np.maximum(lo - margin, 0), np.minimum(hi + margin, shape)])


def foreground_index(
    label: np.ndarray, per_class: int = FG_PER_CLASS
) -> tuple[np.ndarray, np.ndarray]:
    """(voxels uint32, bounds int64 (FG_BOUNDS,)): at most `per_class` flat C-order voxel indices
    of each class, evenly spread; class c's are voxels[bounds[c - 1]:bounds[c]]."""
    flat = label.reshape(-1)
    where = np.flatnonzero(flat)
    where = where[np.argsort(flat[where], kind="stable")]  # by class, then by voxel index
    counts = np.bincount(flat[where], minlength=FG_BOUNDS)[1:]
    kept = [
        run[np.linspace(0, len(run) - 1, per_class).round().astype(np.int64)]
        if len(run) > per_class
        else run
        for run in np.split(where, np.cumsum(counts)[:-1])
    ]
    bounds = np.cumsum([0, *np.minimum(counts, per_class).tolist()], dtype=np.int64)
    return np.concatenate(kept).astype(np.uint32), bounds
