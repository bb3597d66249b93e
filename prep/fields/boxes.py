"""Boxes, keypoints and polygons follow their image: the `geometry` that resizes, crops and pads
the pixels maps source pixel x to x * content_w / w + left in the stored sample (left < 0 where
fill crops, > 0 where fit pads); a box cut by the crop is clipped, one outside it has no area.

>>> place_boxes(np.array([[0, 0, 400, 300]], np.float32), (300, 400), 150, "fill").tolist()
[[0.0, 0.0, 150.0, 150.0]]
>>> place_boxes(np.array([[0, 0, 400, 300]], np.float32), (300, 400), 200, "fit").tolist()
[[0.0, 25.0, 200.0, 175.0]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prep.media.image.geometry import geometry


def place_xy(xy: np.ndarray, upright: tuple[int, int], size: int, mode: str) -> np.ndarray:
    """float64 (N, 2) points (x, y) of the upright image in the pixels of the sample, unclipped."""
    g = geometry(upright[0], upright[1], size, mode)
    (ch, cw), (top, left) = g.content, g.origin
    out = np.asarray(xy, np.float64).reshape(-1, 2).copy()
    out[:, 0] = out[:, 0] * (cw / upright[1]) + left
    out[:, 1] = out[:, 1] * (ch / upright[0]) + top
    return out


def place_boxes(boxes: np.ndarray, upright: tuple[int, int], size: int, mode: str) -> np.ndarray:
    """float32 (N, 4) boxes in the pixels of the sample, clipped to it."""
    out = place_xy(np.asarray(boxes).reshape(-1, 2), upright, size, mode).reshape(-1, 4)
    h, w = geometry(*upright, size, mode).shape
    out[:, 0::2] = np.clip(out[:, 0::2], 0, w)
    out[:, 1::2] = np.clip(out[:, 1::2], 0, h)
    return out.astype(np.float32)


def place_keypoints(
    points: np.ndarray, upright: tuple[int, int], size: int, mode: str
) -> np.ndarray:
    """float32 (N, K, 3) keypoints (x, y, visibility) in the pixels of the sample; one outside
    it or not labelled (v = 0) becomes (0, 0, 0)."""
    pts = np.asarray(points, np.float64).reshape(-1, 3).copy()
    pts[:, :2] = place_xy(pts[:, :2], upright, size, mode)
    h, w = geometry(*upright, size, mode).shape
    x, y = pts[:, 0], pts[:, 1]
    gone = (pts[:, 2] <= 0) | (x < 0) | (y < 0) | (x > w) | (y > h)
    pts[gone] = 0
    return pts.reshape(np.shape(points)).astype(np.float32)


def shown(upright: tuple[int, int], size: int, mode: str) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1): the part of the upright image the sample shows, in its pixels."""
    h, w = geometry(*upright, size, mode).shape
    origin = place_xy(np.zeros((1, 2)), upright, size, mode)[0]
    unit = place_xy(np.array([[upright[1], upright[0]]], np.float64), upright, size, mode)[0]
    scale = (unit - origin) / [upright[1], upright[0]]
    (x0, y0), (x1, y1) = ((np.array([[0, 0], [w, h]], np.float64) - origin) / scale).tolist()
    return max(x0, 0.0), max(y0, 0.0), min(x1, float(upright[1])), min(y1, float(upright[0]))


def kept(
    boxes: np.ndarray, upright: tuple[int, int], sizes: Sequence[int], mode: str
) -> np.ndarray:
    """bool (N,): the boxes left with an area at every one of `sizes` (the others are dropped
    at all sizes: a sample's boxes and labels are the same at each)."""
    keep = np.ones(len(boxes), dtype=bool)
    for size in sizes:
        b = place_boxes(boxes, upright, size, mode)
        keep &= (b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])
    return keep


def outside_rows(boxes: np.ndarray, upright: tuple[int, int], slack: float = 1.0) -> np.ndarray:
    """bool (N,): the boxes that are not x0 <= x1, y0 <= y1 within the (h, w) image (`slack`
    px allowed beyond its edges: annotation tools round), NaN included."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    h, w = upright
    bad = ~np.isfinite(b).all(axis=1) | (b[:, 0] < -slack) | (b[:, 1] < -slack)
    return (
        bad
        | (b[:, 2] > w + slack)
        | (b[:, 3] > h + slack)
        | (b[:, 2] < b[:, 0])
        | (b[:, 3] < b[:, 1])
    )
