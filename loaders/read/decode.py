"""A batch's pixels on the CPU (on a GPU: loaders.read.device): rows of `Pixels` run on a Pool of
threads (libjpeg-turbo and OpenCV release the GIL), a JPEG decoded at 1/2, 1/4 or 1/8 scale
when its box allows, only the box where loaders._jpegroi is built, then resized (bilinear,
area past 2x, nearest for masks). Bad bytes are a FormatError naming the sample."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NoReturn, TypeVar

import numpy as np
from torch.utils.data import get_worker_info

from loaders.fields.image import decode_jpeg, scratch
from loaders.format.spec import FormatError, crc32

try:  # the C extension built by setup.py where libjpeg-turbo's headers are (loaders/_jpegroi.c)
    import loaders._jpegroi as _roi
except ImportError:  # not built: crops decode the whole image, then take their box
    _roi = None

FACTORS = (8, 4, 2)  # libjpeg's power-of-two DCT scales, largest first
# A box is decoded alone when the rows down to its bottom times its width are at most this share
# of the image: the whole decode is faster per pixel (per 256 px photo: a RandomResizedCrop's
# box 240 us alone, 330 whole; a 224 centre 310 against 285; with fast_dct 157 against 170).
ROI_SHARE = 0.7
ROI_SHARE_FAST = 0.9
T = TypeVar("T")  # what a pool's threads are given: jobs, or ranges of a batch


class Pool:
    """A few threads, made on first use and after a fork; in a DataLoader worker, none."""

    def __init__(self, threads: int):
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._lock = threading.Lock()  # loader threads may share one dataset

    def map(self, fn: Callable[[Sequence[T]], None], jobs: Sequence[T]) -> None:
        n = min(self.threads, len(jobs))
        if n <= 1 or get_worker_info() is not None:
            fn(jobs)
            return
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="prep-decode")
                self._pid = os.getpid()
        step = -(-len(jobs) // n)  # one contiguous chunk a thread: few futures a batch
        futures = [self._pool.submit(fn, jobs[i : i + step]) for i in range(0, len(jobs), step)]
        for fut in futures:
            fut.result()  # re-raises a FormatError of any sample

    def __reduce__(self) -> tuple[type[Pool], tuple[int]]:  # a new pool, threads made on use
        return Pool, (self.threads,)


@dataclass
class Pixels:
    """A batch's samples: `srcs` (JPEG bytes, or pixels (h, w[, C])), stored (h, w) `hw`, crop
    `boxes` (top, left, height, width), JPEG's stored CRC-32s, and `places` (store.Places)."""

    srcs: Sequence[np.ndarray]
    places: Sequence[str]
    jpeg: bool
    hw: np.ndarray
    boxes: np.ndarray
    crcs: np.ndarray | None = None

    def fail(self, j: int, why: str) -> NoReturn:
        raise FormatError(f"{self.places[j]}: {why}. HINT: run `prep verify`, then repack")

    def check_crc(self, j: int) -> None:
        """Bit rot is a FormatError, never a smeared picture (on the CPU and the GPU)."""
        if self.crcs is not None and crc32(self.srcs[j].data) != int(self.crcs[j]):
            why = "bit rot, or a file changed after packing"
            self.fail(j, f"the JPEG bytes differ from their checksum ({why})")


def factor(box_hw: tuple[int, int], out_hw: tuple[int, int]) -> int:
    """The DCT scale divisor, 2, 4 or 8 if the output is at most that part of the box, else 1.

    >>> factor((448, 500), (224, 224)), factor((300, 300), (224, 224)), factor((64, 64), (8, 8))
    (2, 1, 8)
    """
    for f in FACTORS:
        if box_hw[0] >= f * out_hw[0] and box_hw[1] >= f * out_hw[1]:
            return f
    return 1


def _resize(src: np.ndarray, dst: np.ndarray, nearest: bool) -> None:
    """`src` (h, w[, C]) resized into `dst` (oh, ow[, C]), in place."""
    if src.shape[:2] == dst.shape[:2]:
        dst[...] = src
        return
    import cv2  # here: `import loaders` stays without OpenCV

    cv2.setNumThreads(1)  # (the whole process's) OpenCV's pool on ours: 1.9x slower on 2 cores
    if nearest:
        interp = cv2.INTER_NEAREST_EXACT
    elif src.shape[0] > 2 * dst.shape[0] or src.shape[1] > 2 * dst.shape[1]:
        interp = cv2.INTER_AREA
    else:
        interp = cv2.INTER_LINEAR
    if src.ndim == 3 and src.shape[2] == 1:  # OpenCV drops a last axis of 1
        src, dst = src[..., 0], dst[..., 0]
    out = cv2.resize(src, (dst.shape[1], dst.shape[0]), dst=dst, interpolation=interp)
    if out is not dst and not np.shares_memory(out, dst):  # OpenCV made a new array
        dst[...] = out


def run(dst: np.ndarray, p: Pixels, nearest: bool, fast: bool, rows: Sequence[int]) -> None:
    """Rows `rows` of `dst` (B, oh, ow[, C]) from their samples' boxes, resized (`nearest`: a
    mask, class ids never blended; `fast`: JPEG's fast integer IDCT and plain upsampling)."""
    oh, ow = dst.shape[1:3]
    channels = dst.shape[3] if dst.ndim == 4 else 1
    at = list(rows)  # the rows' sizes, boxes and CRCs as lists at once: per sample, numpy's
    hws, boxes = p.hw[at].tolist(), p.boxes[at].tolist()  # indexing cost a JPEG's checksum
    crcs = p.crcs[at].tolist() if p.jpeg and p.crcs is not None else None
    for j, hw, (top, left, bh, bw), crc in zip(at, hws, boxes, crcs or at, strict=True):
        src = p.srcs[j]
        if not p.jpeg:
            img = src.reshape(*hw, *dst.shape[3:])
            _resize(img[top : top + bh, left : left + bw], dst[j], nearest)
            continue
        if crcs is not None and crc32(src.data) != crc:
            p.check_crc(j)  # its FormatError
        try:
            if top == left == 0 and [bh, bw] == hw == [oh, ow]:  # whole, at its size: in place
                decode_jpeg(src, (oh, ow), 1, channels, dst[j], fast)
                continue
            f = factor((bh, bw), (oh, ow))
            # The box at 1/f scale: whole decoded pixels covering it (at most one more a side).
            t, lft = top // f, left // f
            region = (t, lft, -(-(top + bh) // f) - t, -(-(left + bw) // f) - lft)
            img = decode_region(src, (hw[0], hw[1]), f, region, channels, fast)
        except (ValueError, OSError, SyntaxError) as e:
            p.fail(j, f"the JPEG sample cannot be decoded ({e})")
        _resize(img, dst[j], False)


def decode_region(
    data: np.ndarray,
    hw: tuple[int, int],
    f: int,
    box: tuple[int, int, int, int],
    channels: int,
    fast: bool = False,
) -> np.ndarray:
    """The pixels (h, w, C) of `box` (at 1/f scale) of the JPEG `data`; ValueError, OSError."""
    top, left, h, w = box
    sides = (math.ceil(hw[0] / f), math.ceil(hw[1] / f))
    share = ROI_SHARE_FAST if fast else ROI_SHARE
    if _roi is None or (top + h) * w > share * sides[0] * sides[1]:
        return decode_jpeg(data, hw, f, channels, None, fast)[top : top + h, left : left + w]
    out = np.frombuffer(scratch(h * w * channels), np.uint8, h * w * channels)
    _roi.decode_box(data, out, *sides, top, left, h, w, f, channels, fast)
    return out.reshape(h, w, channels)
