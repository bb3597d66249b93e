"""The CPU pass of a uint8 batch's resized crop, flip and colour jitter: a numba loop over the
samples, split between threads (docs/loading.md, "Augmentation on the batch"), sampling as
grid_sample does (bilinear, align_corners=False, border padding)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from loaders.augment.batchcrop import Color  # a colour jitter folded into the pass
from loaders.read.decode import Pool

_pool = Pool(max(1, torch.get_num_threads()))


def _resample(src, out, y0, y1, wy, span, ia0, ia1, fx, mat, shift, grey, jitter, lo, hi):
    """Samples lo..hi of `src` (B, H, W, C) uint8 into `out` (B, oh, ow, C) uint8: rows y0, y1
    blended by wy (B, oh); within a row, the flat (W * C) positions ia0, ia1 (B, ow * C) from
    column span[b, 0], blended by fx; then, if `jitter`, each sample's colour."""
    _, oh, ow, C = out.shape
    n, width = ow * C, src.shape[2] * C
    flat = src.reshape(src.shape[0], src.shape[1], width)
    tmp = np.empty((oh, n), np.float32)
    row = np.empty(width, np.float32)
    half, top = np.float32(0.5), np.float32(255.5)
    for b in range(lo, hi):
        first, last = span[b, 0] * C, span[b, 1] * C
        a0, a1, f = ia0[b], ia1[b], fx[b]
        for i in range(oh):  # rows first (contiguous, vectorised), then gathers within the row
            r0, r1, g = flat[b, y0[b, i]], flat[b, y1[b, i]], wy[b, i]
            for k in range(first, last):
                row[k - first] = r0[k] + g * (np.float32(r1[k]) - np.float32(r0[k]))
            t = tmp[i]
            for p in range(n):
                t[p] = row[a0[p]] + f[p] * (row[a1[p]] - row[a0[p]])
        o = out[b].reshape(oh, n)
        if not jitter:
            for i in range(oh):
                for p in range(n):
                    o[i, p] = np.uint8(tmp[i, p] + half)
            continue
        g0, g1, g2 = grey[0], grey[1], grey[2]  # three channels: fits(x, color=True)
        acc = np.float32(0)
        for i in range(oh):
            t = tmp[i]
            for j in range(ow):  # not range(0, n, 3): a strided range does not vectorise
                acc += g0 * t[3 * j] + g1 * t[3 * j + 1] + g2 * t[3 * j + 2]
        off = np.float32(shift[b] * acc / (oh * ow)) + half  # +0.5: truncation rounds
        m = mat[b]  # each entry named: loops over the channels would not vectorise
        m00, m01, m02, m10, m11, m12 = m[0, 0], m[0, 1], m[0, 2], m[1, 0], m[1, 1], m[1, 2]
        m20, m21, m22 = m[2, 0], m[2, 1], m[2, 2]
        for i in range(oh):
            t, oi = tmp[i], o[i]
            for j in range(ow):
                q = 3 * j
                r, g, bl = t[q], t[q + 1], t[q + 2]
                oi[q] = np.uint8(min(max(off + m00 * r + m01 * g + m02 * bl, half), top))
                oi[q + 1] = np.uint8(min(max(off + m10 * r + m11 * g + m12 * bl, half), top))
                oi[q + 2] = np.uint8(min(max(off + m20 * r + m21 * g + m22 * bl, half), top))


@functools.cache
def _compiled() -> Callable[..., None] | None:
    try:
        import numba
    except ImportError:  # torch's batched ops do the same, slower on the CPU
        return None
    # nogil: the pool's threads run it at once; cache: compiled once per machine, not per run.
    jit: Callable[..., Any] = numba.njit(nogil=True, cache=True, fastmath=True)
    return jit(_resample)


def fits(x: torch.Tensor, color: bool = False) -> bool:
    """Whether this pass serves the batch x: uint8 on the CPU, numba installed; RGB for `color`."""
    ok = x.device.type == "cpu" and x.dtype == torch.uint8 and _compiled() is not None
    return ok and (not color or x.shape[1] == 3)


def _taps(coords: torch.Tensor, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear taps of source coordinates (B, k) in [0, n): grid_sample's border padding."""
    x = coords.clamp(0, n - 1).numpy()
    i0 = np.floor(x).astype(np.int64)
    return i0, np.minimum(i0 + 1, n - 1), (x - i0).astype(np.float32)


def resample(
    x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, color: Color | None = None
) -> torch.Tensor:
    """x (B, C, H, W) sampled at source coordinates rows (B, oh), cols (B, ow): channels-last."""
    B, C, H, W = x.shape
    src = x.permute(0, 2, 3, 1).contiguous().numpy()  # a view for channels-last batches
    dst = np.empty((B, rows.shape[1], cols.shape[1], C), np.uint8)  # numpy's: huge pages
    out = torch.from_numpy(dst).permute(0, 3, 1, 2)
    if B == 0:
        return out
    y0, y1, wy = _taps(rows, H)
    x0, x1, wx = _taps(cols, W)
    span = np.stack([np.minimum(x0, x1).min(1), np.maximum(x0, x1).max(1) + 1], 1)
    lane = np.arange(C)
    ia0, ia1 = (((i - span[:, :1])[:, :, None] * C + lane).reshape(B, -1) for i in (x0, x1))
    fx = np.repeat(wx, C, axis=1)
    kernel, jitter = _compiled(), color is not None
    assert kernel is not None, "resample() is for batches that fits() takes"
    if color is None:  # unused by the pass: arrays of the types it was compiled for
        color = (torch.zeros(B, C, C), torch.zeros(B), torch.zeros(C))
    mat, shift, grey = (t.to(torch.float32).numpy() for t in color)
    args = (src, dst, y0, y1, wy, span, ia0, ia1, fx, mat, shift, grey, jitter)
    _pool.map(lambda part: kernel(*args, part[0], part[-1] + 1), range(B))
    return out
