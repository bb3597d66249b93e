"""What the fields draw on (H, W, 3) uint8 pictures for `prep preview` and `prep report`.

>>> tile = np.zeros((4, 4, 3), np.uint8)
>>> blend(tile, np.eye(4, dtype=np.uint8))[0, 0].tolist(), blend(tile, np.eye(4))[0, 1].tolist()
([104, 11, 34], [0, 0, 0])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

ALPHA = 0.45  # a class colour's weight where the class id is not 0
# Class id k > 0 (a mask's class, an instance's number) is drawn in PALETTE[(k - 1) % 8];
# box k of a sample in PALETTE[k % 8]; id 0 (background) is left as it is.
_HEX = "e6194b 3cb44b ffe119 0082c8 f58230 911eb4 46f0f0 f032e6"  # RGB, each colour a word
PALETTE = np.frombuffer(bytes.fromhex(_HEX), np.uint8).reshape(-1, 3).astype(np.float32)


def nearest(plane: np.ndarray, hw: tuple[int, ...]) -> np.ndarray:
    """`plane` (h, w, ...) resized to `hw` by nearest neighbour (the pixel under each centre)."""
    h, w = plane.shape[:2]
    rows = np.minimum(((np.arange(hw[0]) + 0.5) * h / hw[0]).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(hw[1]) + 0.5) * w / hw[1]).astype(np.int64), w - 1)
    return plane[rows[:, None], cols[None, :]]


def blend(picture: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`picture` blended at ALPHA with PALETTE colours where `ids` (h, w), resized, are not 0."""
    ids = nearest(np.asarray(ids), picture.shape[:2]).astype(np.int64)
    if not ids.any():
        return picture
    colour = PALETTE[(ids - 1) % len(PALETTE)]
    mixed = np.rint((1 - ALPHA) * picture.astype(np.float32) + ALPHA * colour)
    return np.where((ids > 0)[..., None], mixed, picture).astype(np.uint8)


def outline(picture: np.ndarray, box: np.ndarray, colour: np.ndarray, width: int = 2) -> None:
    """Draw box (x0, y0, x1, y1) in px of `picture` as a `width` px line inside its edges."""
    h, w = picture.shape[:2]
    x0, y0, x1, y1 = (round(float(v)) for v in box)
    x0, x1 = sorted((min(max(x0, 0), w - 1), min(max(x1, 0), w - 1)))
    y0, y1 = sorted((min(max(y0, 0), h - 1), min(max(y1, 0), h - 1)))
    picture[y0 : y0 + width, x0 : x1 + 1] = colour
    picture[max(y0, y1 - width + 1) : y1 + 1, x0 : x1 + 1] = colour
    picture[y0 : y1 + 1, x0 : x0 + width] = colour
    picture[y0 : y1 + 1, max(x0, x1 - width + 1) : x1 + 1] = colour


def dots(picture: np.ndarray, points: np.ndarray, colour: np.ndarray, side: int = 3) -> None:
    """Mark each (x, y) of `points` (px of `picture`) with a `side` px square."""
    h, w = picture.shape[:2]
    for x, y in np.rint(points).astype(np.int64).tolist():
        if 0 <= x < w and 0 <= y < h:
            r = side // 2
            picture[max(0, y - r) : y + r + 1, max(0, x - r) : x + r + 1] = colour


def marked(
    pictures: list[np.ndarray], items: Iterable, mark: Callable[..., None]
) -> list[np.ndarray]:
    """Copies of `pictures`, `mark` drawing item k of `items` on each in PALETTE[k % 8]."""
    out = [p.copy() for p in pictures]
    for k, item in enumerate(items):
        for p in out:
            mark(p, item, PALETTE[k % len(PALETTE)].astype(np.uint8))
    return out
