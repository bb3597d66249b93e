"""Turning stored samples into a batch's pixels on the CPU: JPEG decoding, crops, resizing.

Each sample is a `Job`: its stored bytes or pixels, its (h, w), its crop box (or none), and the
batch row it fills. `fill(jobs, threads)` runs them on a few threads: libjpeg-turbo (simplejpeg)
and OpenCV release the GIL, so two threads decode on two cores. PIL is the fallback decoder.

A JPEG sample is decoded at 1/2, 1/4 or 1/8 scale (DCT reduction, in the decoder) when its crop's
output is at most that fraction of the box, and only its box where loaders._jpegroi is built
(libjpeg-turbo's crop and skip; else the whole image), then the box is resized: bilinear,
or area averaging when it still shrinks by more than 2 (as prep resizes); nearest for masks.
`fast`: libjpeg-turbo's fast integer inverse DCT and plain chroma upsampling (FFCV's choice):
about 10% less CPU a 256 px photo, pixels within a few levels (README, "Fast DCT").
Bad bytes (a checksum that differs, a stream the decoder refuses, a size that is not the stored
one) raise FormatError naming the shard file and sample; no grey or partial image is returned.
"""

from __future__ import annotations

import io
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.format.jpeg import decode_jpeg, scratch
from loaders.format.spec import FormatError
from loaders.read.pool import Pool

try:  # the C extension built by setup.py where libjpeg-turbo's headers are (loaders/_jpegroi.c)
    from loaders import _jpegroi as _roi
except ImportError:  # not built: crops decode the whole image, then take their box
    _roi = None

FACTORS = (8, 4, 2)  # libjpeg's power-of-two DCT scales, largest first
# A box is decoded alone when the rows down to its bottom times its width are at most this share
# of the image: simplejpeg's whole decode is faster per pixel (CPU per 256 px photo: a
# RandomResizedCrop's box 240 us alone against 330 whole; a 224-of-256 centre 310 against 285).
ROI_SHARE = 0.7
# With fast_dct the box alone wins further: a 224-of-256 centre 157 us against 170 whole.
ROI_SHARE_FAST = 0.9
# A buffer for JPEG samples this large or more is allocated once their headers say they are the
# sides the manifest claims (a lie of 16000 px for 32 px files costs B x 768 MB first). Below it
# the allocation costs less than reading the headers, and each decode checks its own sides.
CHECKED_BYTES = 64 << 20


class Places(Sequence[str]):
    """Where each sample of a batch is, for errors: "FILE (shard S, sample K)", made only when
    one is asked for (a string a sample would cost more than checking its checksum)."""

    def __init__(
        self,
        files: dict[int, object],
        shard: np.ndarray,
        local: np.ndarray,
        source: Callable[[int, int], str | None] | None = None,  # ShardStore.source
    ):
        self.files, self.shard, self.local, self.source = files, shard, local, source

    def __len__(self) -> int:
        return len(self.local)

    def __getitem__(self, j: int) -> str:  # type: ignore[override]
        s, k = int(self.shard[j]), int(self.local[j])
        src = self.source(s, k) if self.source is not None else None
        return f"{self.files[s]} (shard {s}, sample {k}){f', packed from {src}' if src else ''}"


@dataclass
class Job:
    """One sample of a batch: `src` (JPEG bytes, or pixels (h, w[, C])), `dst` its batch row."""

    dst: np.ndarray  # (oh, ow, C) or (oh, ow), uint8, C-contiguous
    src: np.ndarray
    jpeg: bool
    hw: tuple[int, int]  # the stored image's (h, w)
    box: tuple[int, ...]  # (top, left, height, width) in it
    crc: int | None  # the stored CRC-32 of a JPEG sample's bytes
    places: Places  # where the batch's samples are, for errors
    row: int  # this sample's row in the batch
    nearest: bool = False  # a mask: class ids are never blended
    fast: bool = False  # JPEG: the fast integer IDCT and plain upsampling


def check_crc(src: np.ndarray, crc: int | None, places: Sequence[str], row: int) -> None:
    """Bit rot is a FormatError, never a smeared picture (CPU and GPU; crc None: not stored)."""
    if crc is not None and zlib.crc32(src.data) != crc:
        why = "the JPEG bytes differ from their checksum (bit rot, or a file changed after packing)"
        raise FormatError(f"{places[row]}: {why}. HINT: run `prep verify`, then repack")


def jpeg_sides(data: np.ndarray) -> tuple[int, int]:
    """(h, w) of the JPEG in `data`, from its header alone (a few us). Raises ValueError or
    OSError for bytes that are no JPEG."""
    try:
        import simplejpeg
    except ImportError:  # the fallback decoder's header parse
        from PIL import Image

        with Image.open(io.BytesIO(data.tobytes())) as im:
            return im.height, im.width
    h, w, _, _ = simplejpeg.decode_jpeg_header(data)
    return int(h), int(w)


def sides_problem(srcs: Sequence[np.ndarray], hw: np.ndarray) -> tuple[int, str] | None:
    """The first JPEG of `srcs` whose header is not its stored (h, w) of `hw` (B, 2), and how;
    None when all are. Run before a batch of those sides is allocated: a manifest that claims
    16000 px for 32 px JPEGs would otherwise cost B x 16000 x 16000 x C bytes first."""
    for j, (src, (h, w)) in enumerate(zip(srcs, hw.tolist(), strict=True)):
        try:
            got = jpeg_sides(src)
        except (ValueError, OSError, SyntaxError) as e:
            return j, f"the JPEG sample cannot be decoded ({e})"
        if got != (h, w):
            return j, f"the JPEG sample is {got[1]}x{got[0]} px, the manifest says {w}x{h}"
    return None


def check_sides(
    srcs: Sequence[np.ndarray],
    hw: np.ndarray,
    crcs: np.ndarray | None,
    places: Sequence[str],
    nbytes: int,
) -> None:
    """Before a buffer of `nbytes` for the batch is allocated (CHECKED_BYTES or more):
    FormatError naming the first JPEG sample whose header is not its stored size (bit rot,
    when its checksum differs)."""
    found = sides_problem(srcs, hw) if nbytes >= CHECKED_BYTES else None
    if found is not None:
        j, why = found
        check_crc(srcs[j], None if crcs is None else int(crcs[j]), places, j)
        raise FormatError(f"{places[j]}: {why}. HINT: run `prep verify`, then repack")


def factor(box_hw: tuple[int, int], out_hw: tuple[int, int]) -> int:
    """The DCT scale divisor for a box shrunk to `out_hw`: 2, 4 or 8 when the output is at most
    that fraction of the box on both sides, else 1.

    >>> factor((448, 500), (224, 224)), factor((300, 300), (224, 224)), factor((64, 64), (8, 8))
    (2, 1, 8)
    """
    for f in FACTORS:
        if box_hw[0] >= f * out_hw[0] and box_hw[1] >= f * out_hw[1]:
            return f
    return 1


def _cv2() -> Any:
    """OpenCV, imported only when a crop resizes (`import loaders` stays without it), and set
    to one thread: the decode pool's threads are the parallelism, and OpenCV's own pool on top
    of them made each 224 px resize 1.9x slower on 2 cores (75 against 145 us). The setting is
    OpenCV's, for the whole process."""
    import cv2

    cv2.setNumThreads(1)
    return cv2


def _resize(src: np.ndarray, dst: np.ndarray, nearest: bool) -> None:
    """`src` (h, w[, C]) resized into `dst` (oh, ow[, C]), in place."""
    if src.shape[:2] == dst.shape[:2]:
        dst[...] = src
        return
    cv2 = _cv2()
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


def _run(job: Job) -> None:
    oh, ow = job.dst.shape[:2]
    channels = job.dst.shape[2] if job.dst.ndim == 3 else 1
    box = job.box
    if not job.jpeg:
        img = job.src.reshape(*job.hw, *job.dst.shape[2:])
        top, left, bh, bw = box
        _resize(img[top : top + bh, left : left + bw], job.dst, job.nearest)
        return
    check_crc(job.src, job.crc, job.places, job.row)
    f = factor((box[2], box[3]), (oh, ow))
    top, left, bh, bw = box
    # The box at 1/f scale: whole decoded pixels covering it (at most one more on each side).
    t, lft = top // f, left // f
    region = (t, lft, -(-(top + bh) // f) - t, -(-(left + bw) // f) - lft)
    direct = f == 1 and box == (0, 0, *job.hw) and job.hw == (oh, ow)
    try:
        if direct:
            decode_jpeg(job.src, job.hw, f, channels, job.dst, job.fast)
            return
        img = decode_region(job.src, job.hw, f, region, channels, job.fast)
    except (ValueError, OSError, SyntaxError) as e:
        raise FormatError(
            f"{job.places[job.row]}: the JPEG sample cannot be decoded ({e}). "
            "HINT: run `prep verify`, then repack"
        ) from e
    _resize(img, job.dst, False)


def decode_region(
    data: np.ndarray,
    hw: tuple[int, int],
    f: int,
    box: tuple[int, int, int, int],
    channels: int,
    fast: bool = False,
) -> np.ndarray:
    """The pixels (h, w, channels) of `box` (top, left, h, w at 1/f scale) of the JPEG in `data`
    of stored size `hw`: only the box decoded where loaders._jpegroi is built (the same pixels),
    else a view of the whole image decoded. Raises ValueError or OSError for bad bytes."""
    top, left, h, w = box
    sides = (math.ceil(hw[0] / f), math.ceil(hw[1] / f))
    share = ROI_SHARE_FAST if fast else ROI_SHARE
    if _roi is None or (top + h) * w > share * sides[0] * sides[1]:
        return decode_jpeg(data, hw, f, channels, None, fast)[top : top + h, left : left + w]
    out = np.frombuffer(scratch(h * w * channels), np.uint8, h * w * channels)
    _roi.decode_box(data, out, *sides, top, left, h, w, f, channels, fast)
    return out.reshape(h, w, channels)


def jobs_for(
    dst: np.ndarray,
    srcs: Sequence[np.ndarray],
    jpeg: bool,
    hw: np.ndarray,
    boxes: np.ndarray,
    crcs: np.ndarray | None,
    places: Places,
    nearest: bool = False,
    fast: bool = False,
) -> list[Job]:
    """One Job a batch row: `dst` (B, oh, ow[, C]), each sample's source, stored (h, w) and
    box (B, 4), the stored CRC-32s (B,) of JPEG samples, and where each one is (for errors);
    `nearest`: class ids (masks), never blended; `fast`: the fast JPEG IDCT."""
    sides, box, crc = (
        hw.tolist(),
        boxes.tolist(),
        [None] * len(srcs) if crcs is None else crcs.tolist(),
    )
    return [
        Job(dst[j], src, jpeg, tuple(sides[j]), tuple(box[j]), crc[j], places, j, nearest, fast)
        for j, src in enumerate(srcs)
    ]


def fill(jobs: Sequence[Job], pool: Pool) -> None:
    """Run every job on `pool`'s threads."""
    pool.map(_run_all, jobs)


def _run_all(jobs: Sequence[Job]) -> None:
    for job in jobs:
        _run(job)
