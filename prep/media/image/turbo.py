"""The fast path for JPEG photos: libjpeg-turbo through simplejpeg, DCT-scaled like Pillow's
`draft`, so its pixels are Pillow's, bit for bit, at a lower cost a file (no PIL image object,
no mode conversion, no copy into numpy).

It only takes what it can decode under the same pixel policy: RGB (YCbCr) and grayscale JPEGs.
CMYK and YCCK (Adobe's inverted inks), and every file libjpeg-turbo warns about (truncated,
corrupt data: its strict mode raises), go to Pillow, which decides as it always did.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from prep.run.inputs import Reject, os_reject_code
from prep.run.profile import stage

# EXIF orientation -> the same transform as decode._ORIENT, on an (H, W, ...) array.
_ORIENT = {
    2: lambda a: a[:, ::-1],  # FLIP_LEFT_RIGHT
    3: lambda a: a[::-1, ::-1],  # ROTATE_180
    4: lambda a: a[::-1],  # FLIP_TOP_BOTTOM
    5: lambda a: a.swapaxes(0, 1),  # TRANSPOSE
    6: lambda a: a[::-1].swapaxes(0, 1),  # ROTATE_270: a quarter turn clockwise
    7: lambda a: a[::-1, ::-1].swapaxes(0, 1),  # TRANSVERSE
    8: lambda a: a[:, ::-1].swapaxes(0, 1),  # ROTATE_90: a quarter turn anticlockwise
}


def draft_scale(stored: tuple[int, int], need: tuple[int, int]) -> int:
    """The DCT reduction Pillow's `draft` picks: the largest of 8, 4, 2, 1 that keeps both
    sides at least `need` (stored and need are (w, h)).

    >>> draft_scale((4032, 3024), (341, 256)), draft_scale((64, 40), (19, 12))
    (8, 2)
    """
    most = min(stored[0] // max(1, need[0]), stored[1] // max(1, need[1]))
    return next(f for f in (8, 4, 2, 1) if f <= max(1, most))


def decode_jpeg(
    im: Image.Image, need: tuple[int, int], orientation: int, gray: bool
) -> np.ndarray | None:
    """Upright pixels of the JPEG `im` (opened, header read) decoded at `draft_scale`: (H, W, 3)
    or, gray, (H, W) uint8. `need` is the (w, h) to cover, in stored orientation. None when this
    path does not take the file: the caller decodes it with Pillow."""
    fp = getattr(im, "fp", None)  # the open file of an ImageFile, until it is loaded
    if im.mode not in ("RGB", "L") or fp is None:
        return None
    import simplejpeg

    try:
        with stage("read"):
            fp.seek(0)
            data = fp.read()
    except OSError as e:
        raise Reject(os_reject_code(e), f"cannot read: {e.strerror or e}") from e
    w, h = im.size
    f = draft_scale((w, h), need)
    out_h, out_w = -(-h // f), -(-w // f)  # libjpeg rounds the scaled size up, as draft does
    try:
        # min_factor=f and these minimums leave libjpeg-turbo one choice: exactly 1/f (it also
        # has 3/8, 5/8...; Pillow's draft only 1/2, 1/4, 1/8). strict: a warning raises.
        a = simplejpeg.decode_jpeg(
            data, "GRAY" if gray else "RGB", min_height=out_h, min_width=out_w, min_factor=f
        )
    except ValueError:
        return None  # truncated, corrupt or unsupported: Pillow's verdict, as before
    if a.shape[:2] != (out_h, out_w):
        return None
    if gray:
        a = a[..., 0]
    turn = _ORIENT.get(orientation)
    return np.ascontiguousarray(turn(a)) if turn else a
