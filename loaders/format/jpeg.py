"""The jpeg codec's decoding of one sample: libjpeg-turbo through simplejpeg (PIL where it is
missing), at a DCT-reduced scale, strict (a truncated file raises). Batches: loaders.read.decode."""

from __future__ import annotations

import io
import math
import threading

import numpy as np

_local = threading.local()  # per thread: a scratch buffer for decoded images


def scratch(nbytes: int) -> bytearray:
    """This thread's scratch buffer of at least `nbytes` (a decoded image's, reused)."""
    buf: bytearray | None = getattr(_local, "buf", None)
    if buf is None or len(buf) < nbytes:
        buf = _local.buf = bytearray(nbytes)
    return buf


def decode_jpeg(
    data: np.ndarray,
    hw: tuple[int, int],
    f: int,
    channels: int,
    out: np.ndarray | None = None,
    fast: bool = False,
) -> np.ndarray:
    """The JPEG in `data` decoded at 1/f scale: (ceil(h / f), ceil(w / f), channels) uint8, into
    `out` when given; `fast`: the fast IDCT (simplejpeg only). ValueError or OSError: bad bytes."""
    h, w = math.ceil(hw[0] / f), math.ceil(hw[1] / f)
    try:
        import simplejpeg
    except ImportError:  # the fallback: PIL's draft() gives the same DCT scales
        return _decode_pil(data, hw, f, channels, out)
    buf = out if out is not None else scratch(h * w * channels)
    img = simplejpeg.decode_jpeg(
        data,
        colorspace="GRAY" if channels == 1 else "RGB",
        min_height=h,
        min_width=w,
        buffer=buf,
        strict=True,  # "Premature end of JPEG file" and other warnings raise
        fastdct=fast,
        fastupsample=fast,
    )
    if img.shape != (h, w, channels):
        raise ValueError(f"decoded {img.shape[1]}x{img.shape[0]}, stored {hw[1]}x{hw[0]}")
    return img


def _decode_pil(
    data: np.ndarray, hw: tuple[int, int], f: int, channels: int, out: np.ndarray | None
) -> np.ndarray:
    from PIL import Image

    want = (math.ceil(hw[0] / f), math.ceil(hw[1] / f))
    with Image.open(io.BytesIO(data.tobytes())) as im:
        if im.size != (hw[1], hw[0]):
            raise ValueError(f"{im.width}x{im.height}, stored {hw[1]}x{hw[0]}")
        mode = "L" if channels == 1 else "RGB"
        # Pillow picks the DCT scale from whole multiples (w // req): ask for sides // f.
        im.draft(mode, (max(1, hw[1] // f), max(1, hw[0] // f)))
        im.load()  # LOAD_TRUNCATED_IMAGES is off by default: a truncated stream raises
        img = np.asarray(im.convert(mode)).reshape(im.height, im.width, channels)
    if img.shape[:2] != want:  # a scale Pillow would not take (sides of a few px): resize
        import cv2  # only where simplejpeg is missing and Pillow cannot take the scale

        img = cv2.resize(img, want[::-1], interpolation=cv2.INTER_AREA).reshape(*want, channels)
    if out is not None:
        out[...] = img
        return out
    return img
