"""Image quality scores at pack time (issue 39), from the pixels `prep pack` decodes anyway: each
a score in [0, 1], low is bad, an issue where it is under its threshold (CleanVision's
convention and, where it has one, its default threshold; docs/quality.md has the table).

>>> flat = np.full((200, 300, 3), 128, np.uint8)
>>> dict(zip(PIXEL_ISSUES, pixel_scores(flat)[0].round(2).tolist()))
{'blur': 1.0, 'dark': 0.5, 'bright': 0.5, 'low_info': 0.0, 'grayscale': 0.0}
"""

from __future__ import annotations

import functools
import math

import numpy as np

# The issues scored from one image's pixels, in the stored order; `prep issues` adds the shape
# issues (odd_size, odd_aspect), which need the whole dataset (loaders.fields.scores).
PIXEL_ISSUES = ("blur", "dark", "bright", "low_info", "grayscale")
THRESHOLDS = {
    "blur": 0.29,  # CleanVision's; our measure is another (BLUR_SCALE): calibrated to meet it
    "dark": 0.32,  # CleanVision's: the 99th percentile of brightness under 0.32
    "bright": 0.05,  # CleanVision's "light": the 5th percentile over 0.95
    "low_info": 0.3,  # CleanVision's, with its factor 0.1: entropy under 3 bits (information())
    "grayscale": 0.1,  # ours (CleanVision reads the file's mode): mean chroma under 1 level
}
SIDE = 128  # the blur copy's shorter side: the 32 px pHash thumbnail is too small to see blur
FLAT_STD = 2.0  # grey levels: a flatter copy has no edges to judge (low_info's case, not blur)
# r = var(Laplacian) / var(grey) on the SIDE px copy: the blur score is 1 - exp(-r / BLUR_SCALE),
# under 0.29 where r < 0.005. The demo photos (smooth colour fields, one sharp shape: sharper
# photos score higher) measure r 0.014-0.11, 0.007 squeezed to 5:1; blurred by sigma 1 px (at
# SIDE px) 0.002-0.009, by sigma 2-4 px at most 0.003 (tests/test_quality.py plants 2-4 px).
BLUR_SCALE = 0.005 / -math.log(1 - 0.29)
STATS_SIDE = (
    32  # the brightness percentiles' and colour's sample: every few pixels of the SIDE copy
)
STRETCH = 8  # information(): the most a thumbnail's levels are stretched (a 32-level range)
CHROMA_SCALE = 10.0  # grey levels of mean max-min channel spread where grayscale scores 1


def small_copy(img: np.ndarray, side: int = SIDE, area: bool = True) -> np.ndarray:
    """`img` resized to shorter side `side` (as is when smaller: never enlarged): area-averaged
    (a bilinear step to a whole multiple first: INTER_AREA's integer path, as thumbnail()), or
    bilinear alone (`area` False: a sample of the pixels, for statistics)."""
    import cv2

    h, w = img.shape[:2]
    f = side / min(h, w)
    if f >= 1:
        return img
    th, tw = max(1, round(h * f)), max(1, round(w * f))
    if not area:
        return cv2.resize(img, (tw, th), interpolation=cv2.INTER_LINEAR)
    k = max(1, min(h // th, w // tw))
    if h - th * k < k and w - tw * k < k:  # under an output pixel over: cut, not resampled
        img = img[: th * k, : tw * k]
    else:
        img = cv2.resize(img, (tw * k, th * k), interpolation=cv2.INTER_LINEAR)
    return cv2.resize(img, (tw, th), interpolation=cv2.INTER_AREA)


def scored_copy(img: np.ndarray, contents: list[np.ndarray]) -> np.ndarray:
    """The image the scores read: the smallest of the decoded `img` and the pack's resized copies
    of it (`contents`: each size's whole picture, before its crop or pad) with a shorter side of
    at least SIDE px and `img`'s aspect (not stretched). Scoring the pack's 256 px copy rather
    than a 400-600 px decode halves the scores' cost (bench row 39a); never an enlarged copy."""
    h, w = img.shape[:2]
    best = img
    for c in contents:
        ch, cw = c.shape[:2]
        same_aspect = abs(ch * w - cw * h) <= max(h, w)  # geometry() rounds each side: <= 1 px
        if min(ch, cw) >= SIDE and ch <= best.shape[0] and cw <= best.shape[1] and same_aspect:
            best = c
    return best


def brightness(rgb: np.ndarray) -> np.ndarray:
    """CleanVision's perceived brightness of each pixel, 0..1: sqrt(.241 R^2 + .691 G^2 + .068
    B^2) / 255 ((H, W) grey: the level / 255)."""
    return np.sqrt(squared_brightness(rgb)) / 255


def squared_brightness(rgb: np.ndarray) -> np.ndarray:
    """float32 (H * W,): .241 R^2 + .691 G^2 + .068 B^2 of each pixel ((H, W) grey: level^2)."""
    import cv2

    sq = cv2.multiply(rgb, rgb, dtype=cv2.CV_32F)
    if rgb.ndim == 2:
        return sq.reshape(-1)
    return cv2.transform(sq, np.array([[0.241, 0.691, 0.068]], np.float32)).reshape(-1)


@functools.lru_cache(maxsize=8)
def _count_log_count(most: int) -> np.ndarray:
    """c * log2(c) for c = 0..most (0 for 0): entropy()'s sum as one table lookup."""
    c = np.arange(most + 1, dtype=np.float64)
    return c * np.log2(np.maximum(c, 1))


def entropy(gray: np.ndarray) -> float:
    """Shannon entropy (bits) of a grey image's 256-bin histogram (PIL's Image.entropy):
    log2(n) - sum(c log2 c) / n over the bins' counts c."""
    n = gray.size
    counts = np.bincount(gray.reshape(-1), minlength=256)
    table = _count_log_count(1 << n.bit_length())  # a few tables of powers of two, cached
    return max(0.0, math.log2(max(n, 1)) - float(table[counts].sum()) / max(n, 1))


def information(gray: np.ndarray) -> float:
    """The entropy (bits) of a thumbnail of `gray` (its shorter side 32 px, by whole-block means:
    a histogram has no layout to squash), its levels stretched so that its 1st-99th percentiles
    span 0-255 (at most STRETCH times) before they are rounded: a bright or dark image holds as
    much information as its structure (unstretched, one CleanVision calls light has at most 14
    levels in 95% of its pixels: under 4 bits); a flat one stays flat."""
    import cv2

    h, w = gray.shape[:2]
    k = max(1, min(h, w) // 32)
    th, tw = h // k, w // k  # the last few rows and columns cut: INTER_AREA's integer path
    block = np.ascontiguousarray(gray[: th * k, : tw * k], dtype=np.float32)
    thumb = cv2.resize(block, (tw, th), interpolation=cv2.INTER_AREA)  # k x k blocks' means
    flat = thumb.reshape(-1)
    k1, k99 = int(0.01 * (len(flat) - 1)), int(0.99 * (len(flat) - 1))
    part = np.sort(flat)  # numpy's vectorised sort: faster than np.partition at this size
    lo, hi = float(part[k1]), float(part[k99])
    gain = 255 / max(hi - lo, 255 / STRETCH)
    # (level - lo) * gain rounded, within 0..255: clipped below lo first (convertScaleAbs takes
    # the absolute value), above 255 by its saturation
    return entropy(cv2.convertScaleAbs(cv2.max(thumb, lo), alpha=gain, beta=-lo * gain))


def statistics(small: np.ndarray, gray: np.ndarray, side: int = STATS_SIDE) -> tuple[float, ...]:
    """What the scores are made of, as prep._quality.stats computes them in one call (the
    extension, where built; this is its reference), from `small`, the SIDE px copy (RGB or
    grey), and `gray`, its grey: the grey's std and its Laplacian's (3x3, OpenCV's ksize=1),
    information(gray), and of a sample of its pixels (every few: shorter side `side`) the
    brightness at its 99th and 5th percentiles (np.percentile's "lower"), the mean max - min
    channel (chroma) and the R, G, B means and standard deviations (grey: its own, thrice)."""
    import cv2

    step = max(1, min(small.shape[:2]) // side)
    h, w = small.shape[:2]  # every step-th pixel (nearest: numpy's strided copy is 3x slower)
    sample = cv2.resize(small, (w // step, h // step), interpolation=cv2.INTER_NEAREST)
    gray_std = cv2.meanStdDev(gray)[1][0, 0]
    lap_std = cv2.meanStdDev(cv2.Laplacian(gray, cv2.CV_16S, ksize=1))[1][0, 0]
    b2 = np.sort(squared_brightness(sample))  # the percentiles of its square root: the same
    n = len(b2) - 1  # pixels; sorted: faster than np.partition at this size
    chroma = 0.0  # the mean of each pixel's max - min channel: (|r-g| + |g-b| + |r-b|) / 2
    if sample.ndim == 3:
        r, g, bl = cv2.split(sample)
        l1 = sum(cv2.norm(a, b, cv2.NORM_L1) for a, b in ((r, g), (g, bl), (r, bl)))
        chroma = l1 / (2 * r.size)
    mean, std = (np.resize(v.reshape(-1), 3).tolist() for v in cv2.meanStdDev(sample))
    p99, p5 = (math.sqrt(b2[int(q * n)]) / 255 for q in (0.99, 0.05))
    return (gray_std, lap_std, p99, p5, information(gray), chroma, *mean, *std)


def pixel_scores(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 (5,) scores in PIXEL_ISSUES order of an (H, W, 3) RGB or (H, W) grey image (grey:
    grayscale 0), and uint8 (6,) colour statistics (R, G, B means and standard deviations, the
    colour half of the outlier search's embedding: loaders.fields.scores.embedding). Its SIDE px
    copy's grey gives blur and information, every few pixels of it (STATS_SIDE px) the
    brightness percentiles, colour and chroma. Blur is 1 - exp(-r / BLUR_SCALE), r =
    var(Laplacian) / var(grey): dividing by the contrast makes a dark, bright or faint image as
    sharp as its edges are; a flat one scores 1 (it is low_info's case)."""
    import cv2

    small = np.ascontiguousarray(small_copy(img))
    gray = cv2.cvtColor(small, cv2.COLOR_RGB2GRAY) if small.ndim == 3 else small
    gray_std, lap_std, p99, p5, bits, chroma, *colour = STATS(small, gray, STATS_SIDE)
    flat = gray_std < FLAT_STD or min(small.shape[:2]) < 3  # no edges to judge: low_info's
    blur = 1.0 if flat else 1.0 - math.exp(-((lap_std / gray_std) ** 2) / BLUR_SCALE)
    scores = (blur, p99, 1 - p5, 0.1 * bits, chroma / CHROMA_SCALE)
    return (
        np.array([min(1.0, max(0.0, s)) for s in scores], np.float32),
        np.array([round(v) for v in colour], np.uint8),  # levels, half to even as np.rint
    )


try:  # one call a photo where the extension was built: in a pack several times cheaper
    from prep._quality import stats as STATS
except ImportError:  # (no C compiler at install): the same values, ~20 calls
    STATS = statistics


def stored_issues(gray: bool) -> tuple[str, ...]:
    """The pixel issues a pack scores: a grey pack has no colour to miss."""
    return tuple(n for n in PIXEL_ISSUES if not (gray and n == "grayscale"))


def flagged(scores: np.ndarray, names: tuple[str, ...]) -> list[str]:
    """The issues (of `names`, the scores' order) a sample's scores are under the threshold of."""
    return [n for n, s in zip(names, scores.tolist(), strict=True) if s < THRESHOLDS[n]]


class Tally:
    """One shard's count of each issue flagged, and its samples' upright sizes (the manifest's
    shape reference is of the whole dataset's: loaders.fields.scores.shape_reference)."""

    def __init__(self, names: tuple[str, ...]):
        self.names, self.counts = names, [0] * len(names)
        self.hw: list[list[int]] = []

    def add(self, scores: np.ndarray, upright: tuple[int, int]) -> None:
        for k, name in enumerate(self.names):
            self.counts[k] += bool(scores[k] < THRESHOLDS[name])
        self.hw.append([int(upright[0]), int(upright[1])])

    def record(self) -> dict[str, object]:
        return {"flagged": dict(zip(self.names, self.counts, strict=True)), "hw": self.hw}
