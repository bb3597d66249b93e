"""The polygons field's writer: outlines (COCO's segmentation polygons) in the upright image's
pixels placed in each stored size as the image is (prep.fields.boxes.place_xy), after cutting
each to what every size shows of the image (fill's crop); a polygon left without area goes."""

from __future__ import annotations

from typing import Any

import numpy as np

from loaders.fields import polygons as kinds
from loaders.fields.base import FieldError
from prep.fields.boxes import place_xy, stored_hw


class Polygons(kinds.Polygons):
    """A value is a list of polygons, each (k, 2) points (x, y) or COCO's flat [x0, y0, x1, y1,
    ...], k >= 3, in the pixels of the upright full-size image of field `image`."""

    def encode_for(self, value: Any, upright: tuple[int, int]) -> dict[str, np.ndarray]:
        try:
            polys = [np.asarray(p, np.float64).reshape(-1, 2) for p in value]
        except (TypeError, ValueError) as e:
            raise FieldError("field_shape", f"polygons are lists of (x, y) points ({e})") from None
        if any(len(p) < 3 or not np.isfinite(p).all() for p in polys):
            raise FieldError("field_shape", "a polygon has fewer than 3 finite points")
        x0, y0, x1, y1 = _shown(upright, max(self.sizes), self.mode)
        shown = [np.add(kinds.clip(p - [x0, y0], y1 - y0, x1 - x0), [x0, y0]) for p in polys]
        kept = [p for p in shown if len(p) >= 3 and kinds.area(p) > 0]
        xy = np.concatenate(kept) if kept else np.zeros((0, 2))
        out = {"_lens": np.array([len(p) for p in kept], np.int32)}
        for s in self.sizes:
            h, w = stored_hw(upright, s, self.mode)
            placed = np.clip(place_xy(xy, upright, s, self.mode), 0, [w, h])  # rounding only
            out[f"_{s}"] = placed.astype(np.float32).reshape(-1)
        return out


def _shown(upright: tuple[int, int], size: int, mode: str) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1): the part of the upright image a sample of `size` shows, in its pixels."""
    h, w = stored_hw(upright, size, mode)
    (x0, y0), (x1, y1) = (place_back(c, upright, size, mode) for c in ((0, 0), (w, h)))
    return max(x0, 0.0), max(y0, 0.0), min(x1, float(upright[1])), min(y1, float(upright[0]))


def place_back(xy: tuple[float, float], upright: tuple[int, int], size: int, mode: str) -> Any:
    """The upright pixel a stored sample's point (x, y) shows (place_xy's inverse)."""
    origin = place_xy(np.zeros((1, 2)), upright, size, mode)[0]
    unit = place_xy(np.array([[upright[1], upright[0]]], np.float64), upright, size, mode)[0]
    scale = (unit - origin) / [upright[1], upright[0]]
    return tuple(((np.asarray(xy, np.float64) - origin) / scale).tolist())
