"""Decoding: one pixel policy whatever the source (docs/images.md, "Pixel policy"); bad input raises
`Reject` with a reject code (docs/rejects.md). RGB and gray JPEGs take libjpeg-turbo (simplejpeg)
at the DCT scale of Pillow's `draft`: Pillow's pixels bit for bit, cheaper; the rest go to
Pillow."""

from __future__ import annotations

import io
import os
import stat
import struct
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import cv2
import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from prep.media.image.geometry import geometry
from prep.run.inputs import Reject, check_file, os_reject_code
from prep.run.profile import timed

BACKGROUND = (255, 255, 255)  # alpha is composited on white, as a browser shows a PNG
ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated file must raise, not turn grey
Image.MAX_IMAGE_PIXELS = None  # we check `max_pixels` ourselves, before decoding
# What Pillow raises on malformed files (its fuzzers' list).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, struct.error)
_HIGH_BIT_DEPTH = ("I", "F")  # and every "I;16*" mode
# EXIF orientation -> what turns the stored (H, W, ...) pixels upright (Pillow's transposes), by
# OpenCV: the same pixels as numpy's strided views copied, 5-7x cheaper (a rotated photo's copy cost
# 1.7 ms, a tenth of its pack).
_ORIENT = {
    2: lambda a: cv2.flip(a, 1),  # FLIP_LEFT_RIGHT
    3: lambda a: cv2.rotate(a, cv2.ROTATE_180),
    4: lambda a: cv2.flip(a, 0),  # FLIP_TOP_BOTTOM
    5: lambda a: cv2.transpose(a),  # TRANSPOSE
    6: lambda a: cv2.rotate(a, cv2.ROTATE_90_CLOCKWISE),  # ROTATE_270
    7: lambda a: cv2.flip(cv2.transpose(a), -1),  # TRANSVERSE
    8: lambda a: cv2.rotate(a, cv2.ROTATE_90_COUNTERCLOCKWISE),  # ROTATE_90
}


def _orientation(im: Image.Image) -> int:
    try:
        value = im.getexif().get(0x0112, 1)
        return int(value) if int(value) in _ORIENT else 1
    except Exception:
        return 1


def _upright(a: np.ndarray, orientation: int) -> np.ndarray:
    turn = _ORIENT.get(orientation)
    return turn(np.ascontiguousarray(a)) if turn else a


def _to_mode(im: Image.Image, gray: bool, background: tuple[int, ...]) -> Image.Image:
    """Any Pillow mode to RGB (or L), as docs/images.md, "Pixel policy" says."""
    if im.mode in _HIGH_BIT_DEPTH or im.mode.startswith("I;16"):
        a = np.asarray(im)
        a = np.clip(a, 0, 255) if im.mode == "F" else np.clip(a.astype(np.int64), 0, 65535) >> 8
        im = Image.fromarray(a.astype(np.uint8), "L")
    # Alpha, and a transparent colour or palette entry ("transparency": P, L, RGB, 1).
    if "A" in im.mode or "a" in im.mode or "transparency" in im.info:
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (*background[:3], 255))
        im = Image.alpha_composite(bg, rgba).convert("RGB")
    if im.mode not in ("L", "RGB"):  # P, 1, CMYK, YCbCr, LAB, HSV...: Pillow's RGB conversion
        im = im.convert("L" if im.mode == "1" else "RGB")
    target = "L" if gray else "RGB"
    return im if im.mode == target else im.convert(target)


@contextmanager
def _pillow_errors() -> Iterator[None]:
    try:
        yield
    except UnidentifiedImageError as e:
        raise Reject("not_image", "not an image format Pillow reads (decoded by content)") from e
    except _DECODE_ERRORS as e:
        if isinstance(e, OSError) and e.errno is not None:  # the file system failed, not the format
            raise Reject(os_reject_code(e), f"cannot read: {e.strerror}") from e
        text = str(e) or type(e).__name__
        truncated = isinstance(e, EOFError) or any(
            word in text.lower() for word in ("truncated", "premature", "end of file")
        )
        raise Reject("truncated" if truncated else "corrupt", f"cannot decode: {text}") from e


@timed("read")  # opening and the header; Pillow reads the pixel data while decoding
def _open(path: Path | io.BytesIO, max_pixels: int) -> Image.Image:
    size = path.getbuffer().nbytes if isinstance(path, io.BytesIO) else _regular_size(path)
    if size == 0:
        raise Reject("empty", "zero-byte file")
    with _pillow_errors():
        im = Image.open(path)
    w, h = im.size
    if w * h > max_pixels:
        im.close()
        raise Reject(
            "too_large",
            f"{w}x{h} = {w * h:,} pixels exceeds --max-pixels {max_pixels:,} "
            "(refused before decoding; raise --max-pixels if the file is trusted)",
        )
    if w == 0 or h == 0:
        im.close()
        raise Reject("corrupt", f"image has size {w}x{h}")
    return im


def _regular_size(path: Path) -> int:
    # stat never blocks: a FIFO or device is refused here, before open() could wait on it.
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a name no file can have (a NUL byte...)
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        problem = check_file(path, str(path))  # the reason: broken link, loop, FIFO...
        if problem is None:  # it changed between the two looks: not worth a race
            raise Reject("unreadable", "the file changed while being opened")
        raise Reject(problem["reason"], problem["message"])
    return st.st_size


def _load(im: Image.Image) -> None:
    with _pillow_errors():
        im.seek(0)  # first frame of an animation
        im.load()


def draft_scale(stored: tuple[int, int], need: tuple[int, int]) -> int:
    """Pillow's `draft` DCT reduction: the largest of 8, 4, 2, 1 keeping both sides >= `need`.

    >>> draft_scale((4032, 3024), (341, 256)), draft_scale((64, 40), (19, 12))
    (8, 2)
    """
    most = min(stored[0] // max(1, need[0]), stored[1] // max(1, need[1]))
    return next(f for f in (8, 4, 2, 1) if f <= max(1, most))


@timed("read")
def _whole(fp: BinaryIO) -> bytes:
    """The bytes of the file `im.fp`: read(size), one copy (a buffered file's read() copies them
    twice: 0.2 of 0.3 ms for a 700 KB photo)."""
    fp.seek(0)
    try:
        size = os.fstat(fp.fileno()).st_size
    except (AttributeError, io.UnsupportedOperation):  # a BytesIO
        return fp.read()
    return fp.read(size)


def decode_jpeg(
    im: Image.Image, need: tuple[int, int], orientation: int, gray: bool
) -> np.ndarray | None:
    """decode_image's pixels of JPEG `im` at `draft_scale`, or None: Pillow decodes it."""
    fp = getattr(im, "fp", None)  # the open file of an ImageFile, until it is loaded
    if im.mode not in ("RGB", "L") or fp is None:
        return None
    import simplejpeg

    try:
        data = _whole(fp)
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
    return _upright(a[..., 0] if gray else a, orientation)


def decode_nvjpeg(
    im: Image.Image, orientation: int, gray: bool, diffs: list[int] | None
) -> np.ndarray | None:
    """JPEG `im` decoded whole by nvJPEG on the GPU (torchvision), or None: the CPU decodes it
    (CMYK, progressive, or what nvJPEG refuses). `diffs` gets the largest difference of its
    pixels from libjpeg-turbo's (nvJPEG's IDCT is its own): the manifest's extra.decode."""
    fp = getattr(im, "fp", None)
    if im.mode not in ("RGB", "L") or fp is None or im.info.get("progressive"):
        return None
    import simplejpeg
    import torch
    from torchvision.io import ImageReadMode
    from torchvision.io import decode_jpeg as nvjpeg

    data = _whole(fp)
    read_mode = ImageReadMode.GRAY if gray else ImageReadMode.RGB
    try:
        pixels = nvjpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), read_mode, "cuda")
    except RuntimeError:
        return None
    a = pixels.permute(1, 2, 0).cpu().numpy()
    if diffs is not None:
        ref = simplejpeg.decode_jpeg(data, "GRAY" if gray else "RGB").reshape(a.shape)
        diffs.append(int(np.abs(a.astype(np.int16) - ref).max()))
    return _upright(a[..., 0] if gray else a, orientation)


@timed("decode")
def decode_image(
    path: Path | io.BytesIO,
    hint: tuple[int, ...] | None = None,
    gray: bool = False,
    max_pixels: int = 100_000_000,
    mode: str = "fill",
    background: tuple[int, ...] = BACKGROUND,
    device: str = "cpu",
    diffs: list[int] | None = None,
) -> tuple[np.ndarray, tuple[int, int]]:
    """Upright pixels, (H, W, 3) or, gray, (H, W) uint8, and the full-size upright (h, w);
    `hint` (sizes) lets a JPEG decode at a DCT scale still covering the largest in `mode`;
    device "cuda": whole, by nvJPEG (decode_nvjpeg), where it takes the JPEG."""
    # Pillow's warnings about a file are noise: the policy decides what they mean.
    with warnings.catch_warnings(action="ignore"), _open(path, max_pixels) as im:
        orientation = _orientation(im)
        w, h = im.size
        upright = (w, h) if orientation in (5, 6, 7, 8) else (h, w)
        g = geometry(upright[0], upright[1], max(hint or (1,)), mode)
        if hint is not None and g.content[0] * g.content[1] > max_pixels:
            # A 1 x 100000 strip in fill mode would be resized to 256 x 25.6M before its crop.
            raise Reject(
                "too_large",
                f"{w}x{h} is too elongated for --mode {mode} at {max(hint)} px: resizing would "
                f"make {g.content[1]}x{g.content[0]} pixels, over --max-pixels {max_pixels:,}",
            )
        if hint is not None and im.format == "JPEG":
            need_h, need_w = g.content
            # draft() takes the stored (w, h): swap back for rotated photos.
            req = (need_h, need_w) if orientation in (5, 6, 7, 8) else (need_w, need_h)
            on_gpu = decode_nvjpeg(im, orientation, gray, diffs) if device == "cuda" else None
            fast = on_gpu if on_gpu is not None else decode_jpeg(im, req, orientation, gray)
            if fast is not None:
                return fast, upright
            im.draft("L" if gray else "RGB", req)
        _load(im)
        try:
            out = _to_mode(im, gray, background)
        except (ValueError, OSError) as e:  # a colour mode Pillow cannot convert
            raise Reject("unsupported", f"colour mode {im.mode}: {e}") from e
        return _upright(np.asarray(out), orientation), upright


@timed("decode")
def decode_mask(path: Path, max_pixels: int = 100_000_000) -> np.ndarray:
    """Class ids (H, W) uint8 of an L, palette, bilevel or 16/32-bit (ids <= 255) image."""
    with warnings.catch_warnings(action="ignore"), _open(path, max_pixels) as im:
        orientation = _orientation(im)
        _load(im)
        if im.mode in ("L", "P", "1"):
            # Bilevel reads as bool, so its ids are 0/1; convert("L") would make them 0/255.
            return _upright(np.asarray(im, dtype=np.uint8), orientation)
        if im.mode.startswith("I"):
            a = np.asarray(im)
            if a.max(initial=0) > 255 or a.min(initial=0) < 0:
                raise Reject("mask_values", f"mask holds class ids up to {a.max()}; at most 255")
            return _upright(a.astype(np.uint8), orientation)
        raise Reject(
            "mask_mode",
            f"mask is {im.mode}; masks must be single-channel class ids (L or palette PNG)",
        )
