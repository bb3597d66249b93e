"""COCO segmentations to pixels at the image's full (h, w): polygons (x0 y0 x1 y1 ... in source
pixels) and RLE (run lengths over the column-major mask, a list or COCO's compressed string).

>>> rle_decode({"counts": [2, 3, 1], "size": [3, 2]}).T.tolist()
[[0, 0, 1], [1, 1, 0]]
>>> rle_counts("52203")  # the 4th and 5th are 0 and 3 more than the 2nd and 3rd
[5, 2, 2, 2, 5]
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHIFT = 4  # polygon vertices to 1/16 px (cv2.fillPoly's fixed point)
# A vertex farther is no annotation (NaN, Infinity, 1e308); 2**24 px at 1/16 px fits cv2's int32
MAX_COORD = 2**24


def rle_counts(text: str) -> list[int]:
    """COCO's compressed RLE string (5-bit groups, deltas from the third count on) as counts."""
    counts: list[int] = []
    p = 0
    while p < len(text):
        x = k = 0
        more = True
        while more:
            if p == len(text):  # the last group said "more"
                raise ValueError("compressed RLE counts end inside a count")
            c = ord(text[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p, k = p + 1, k + 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def rle_encode(mask: np.ndarray) -> dict[str, Any]:
    """A (h, w) mask (nonzero: inside) as COCO's compressed RLE: the inverse of rle_decode.

    >>> rle_encode(np.array([[0, 1], [0, 1], [1, 0]], np.uint8))
    {'counts': '231', 'size': [3, 2]}
    """
    flat = (np.asarray(mask).T.reshape(-1) > 0).astype(np.int8)  # column-major
    edges = np.flatnonzero(np.diff(flat)) + 1
    counts = np.diff(np.concatenate([[0], edges, [len(flat)]])).tolist()
    if len(flat) and flat[0]:
        counts = [0, *counts]  # runs start with 0s
    out = []
    for i, x in enumerate(counts):
        x = x - counts[i - 2] if i > 2 else x
        more = True
        while more:
            c, x = x & 0x1F, x >> 5
            more = x != -1 if c & 0x10 else x != 0
            out.append(chr((c | 0x20 if more else c) + 48))
    return {"counts": "".join(out), "size": [int(mask.shape[0]), int(mask.shape[1])]}


def rle_decode(rle: dict[str, Any]) -> np.ndarray:
    """An RLE (uncompressed or compressed) as a uint8 (h, w) mask of 0 and 1."""
    h, w = (int(v) for v in rle["size"])
    counts = rle["counts"]
    counts = rle_counts(counts) if isinstance(counts, str) else [int(c) for c in counts]
    if any(c < 0 for c in counts) or sum(counts) != h * w:
        raise ValueError(f"RLE counts sum to {sum(counts)}, not {h} x {w}")
    values = np.arange(len(counts)) % 2  # runs of 0, then 1, alternating
    flat = np.repeat(values.astype(np.uint8), counts)
    return flat.reshape(w, h).T  # column-major, as COCO stores it


def rasterise(segmentation: Any, hw: tuple[int, int]) -> np.ndarray:
    """One annotation's segmentation as a uint8 (h, w) mask of 0 and 1; ValueError if odd."""
    import cv2

    try:
        if isinstance(segmentation, dict):
            if isinstance(segmentation.get("counts"), bytes):
                segmentation = {**segmentation, "counts": segmentation["counts"].decode()}
            size = tuple(int(v) for v in segmentation["size"])
            if size != tuple(hw):  # before decoding: its counts may claim any size
                raise ValueError(f"RLE of size {list(size)} on a {hw[1]}x{hw[0]} image")
            return np.ascontiguousarray(rle_decode(segmentation))
        mask = np.zeros(hw, np.uint8)
        polygons = [np.asarray(p, np.float64).reshape(-1, 2) for p in segmentation]
        if not all(np.all(np.abs(p) <= MAX_COORD) for p in polygons):  # NaN fails it too
            raise ValueError(f"a polygon vertex is not a number within {MAX_COORD:,} px")
        points = [np.round(p * (1 << SHIFT)).astype(np.int32) for p in polygons if len(p) >= 3]
        if points:
            cv2.fillPoly(mask, points, 1, lineType=cv2.LINE_8, shift=SHIFT)
        return mask
    except OverflowError as e:  # JSON's Infinity, or an integer no float holds
        raise ValueError(f"a segmentation holding a number out of range ({e})") from None


def semantic(segmentations: list[Any], labels: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """The class-id mask (h, w) uint8: label + 1 where each instance lies, later over earlier."""
    out = np.zeros(hw, np.uint8)
    for seg, label in zip(segmentations, labels, strict=True):
        out[rasterise(seg, hw) > 0] = int(label) + 1  # labels < 255: checked by the importer
    return out
