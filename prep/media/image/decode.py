"""Decoding and resizing: arrays in, arrays out, one pixel policy whatever the source.

Pixel policy (see README "Pixel policy"): decode by content, not by extension; EXIF orientation
applied (malformed EXIF is ignored); first frame of animations; palette, CMYK and other modes to
RGB (or L); 16-bit scaled to 8-bit (v >> 8); alpha composited on BACKGROUND (or --background);
decompression bombs refused from the header, before decoding; truncated files rejected, never
padded with grey.
Every input that cannot be used raises `Reject` with one of the README's reject codes.
"""

from __future__ import annotations

import io
import os
import stat
import struct
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from prep.media.image.geometry import geometry
from prep.media.image.turbo import decode_jpeg
from prep.run.inputs import Reject, check_file, os_reject_code
from prep.run.profile import timed

BACKGROUND = (255, 255, 255)  # alpha is composited on white, as a browser shows a PNG
ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated file must raise, not turn grey
Image.MAX_IMAGE_PIXELS = None  # we check `max_pixels` ourselves, before decoding
# What Pillow raises on malformed files: OSError (truncated, broken stream), SyntaxError and
# struct.error (bad headers), ValueError, EOFError, IndexError, TypeError (its fuzzers' list).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, struct.error)
_HIGH_BIT_DEPTH = ("I", "F")  # and every "I;16*" mode
# EXIF orientation -> the transpose that displays the stored pixels upright.
_ORIENT = {
    2: (Image.Transpose.FLIP_LEFT_RIGHT,),
    3: (Image.Transpose.ROTATE_180,),
    4: (Image.Transpose.FLIP_TOP_BOTTOM,),
    5: (Image.Transpose.TRANSPOSE,),
    6: (Image.Transpose.ROTATE_270,),
    7: (Image.Transpose.TRANSVERSE,),
    8: (Image.Transpose.ROTATE_90,),
}


def _orientation(im: Image.Image) -> int:
    try:
        value = im.getexif().get(0x0112, 1)
        return int(value) if int(value) in _ORIENT else 1
    except Exception:
        return 1


def _to_8bit(im: Image.Image) -> Image.Image:
    """16/32-bit integer and float modes to L: integers keep their top byte (v >> 8)."""
    a = np.asarray(im)
    if im.mode == "F":
        a8 = np.clip(a, 0, 255).astype(np.uint8)
    else:
        a8 = (np.clip(a.astype(np.int64), 0, 65535) >> 8).astype(np.uint8)
    return Image.fromarray(a8, "L")


def _to_mode(im: Image.Image, gray: bool, background: tuple[int, ...] = BACKGROUND) -> Image.Image:
    """Any Pillow mode to RGB (or L): see the module docstring for the policy; alpha is
    composited on `background` (R, G, B)."""
    target = "L" if gray else "RGB"
    if im.mode in _HIGH_BIT_DEPTH or im.mode.startswith("I;16"):
        im = _to_8bit(im)
    # Alpha, and a transparent colour or palette entry ("transparency": P, L, RGB, 1).
    if "A" in im.mode or "a" in im.mode or "transparency" in im.info:
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (*background[:3], 255))
        im = Image.alpha_composite(bg, rgba).convert("RGB")
    if im.mode not in ("L", "RGB"):  # P, 1, CMYK, YCbCr, LAB, HSV...: Pillow's RGB conversion
        im = im.convert("L" if im.mode == "1" else "RGB")
    return im if im.mode == target else im.convert(target)


@timed("read")  # opening and the header; Pillow reads the pixel data while decoding
def _open(path: Path | io.BytesIO, max_pixels: int) -> Image.Image:
    """The image (a file, or an encoded file's bytes) with only its header read; refuses what
    must not be decoded."""
    size = path.getbuffer().nbytes if isinstance(path, io.BytesIO) else _regular_size(path)
    if size == 0:
        raise Reject("empty", "zero-byte file")
    try:
        im = Image.open(path)
    except UnidentifiedImageError as e:
        raise Reject("not_image", "not an image format Pillow reads (decoded by content)") from e
    except OSError as e:
        if e.errno is not None:  # the file system failed, not the format
            raise Reject(os_reject_code(e), f"cannot read: {e.strerror}") from e
        raise _decode_reject(e) from e
    except _DECODE_ERRORS as e:
        raise _decode_reject(e) from e
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
    """The size of a regular file; Reject for anything else."""
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


def _decode_reject(e: BaseException) -> Reject:
    text = str(e) or type(e).__name__
    truncated = isinstance(e, EOFError) or any(
        word in text.lower() for word in ("truncated", "premature", "end of file")
    )
    return Reject("truncated" if truncated else "corrupt", f"cannot decode: {text}")


def _load(im: Image.Image) -> None:
    try:
        im.seek(0)  # first frame of an animation
        im.load()
    except OSError as e:
        if e.errno is not None:  # e.g. EIO while reading the pixel data
            raise Reject(os_reject_code(e), f"cannot read: {e.strerror}") from e
        raise _decode_reject(e) from e
    except _DECODE_ERRORS as e:
        raise _decode_reject(e) from e


def _transpose(im: Image.Image, orientation: int) -> Image.Image:
    for op in _ORIENT.get(orientation, ()):
        im = im.transpose(op)
    return im


@timed("decode")
def decode_image(
    path: Path | io.BytesIO,
    hint: tuple[int, ...] | None = None,
    gray: bool = False,
    max_pixels: int = 100_000_000,
    mode: str = "fill",
    background: tuple[int, ...] = BACKGROUND,
) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode upright pixels: (H, W, 3) or, gray, (H, W) uint8, and the full-size upright (h, w).

    `hint` = (size, ...) lets a JPEG be decoded at a DCT-reduced scale (1/2, 1/4, 1/8) that still
    covers the largest requested `size` in `mode`: 4-8x less work on a phone photo.
    Transparent pixels are composited on `background` (R, G, B).
    Raises Reject for an input that cannot be used."""
    # Pillow's warnings about a file ("Corrupt EXIF data", "Truncated File Read") are noise
    # here: the policy decides what they mean, and a worker would print each one.
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
            fast = decode_jpeg(im, req, orientation, gray)  # the same pixels, faster
            if fast is not None:
                return fast, upright
            im.draft("L" if gray else "RGB", req)
        _load(im)
        out = _transpose(im, orientation)
        try:
            out = _to_mode(out, gray, background)
        except (ValueError, OSError) as e:  # a colour mode Pillow cannot convert
            raise Reject("unsupported", f"colour mode {out.mode}: {e}") from e
        return np.asarray(out), upright


@timed("decode")
def decode_mask(path: Path, max_pixels: int = 100_000_000) -> np.ndarray:
    """A mask of class ids (H, W) uint8: L or palette images (the palette index is the class
    id), bilevel images (classes 0 and 1), or 16/32-bit images whose ids are at most 255."""
    with warnings.catch_warnings(action="ignore"), _open(path, max_pixels) as im:
        orientation = _orientation(im)
        _load(im)
        out = _transpose(im, orientation)
        if out.mode in ("L", "P", "1"):
            # Bilevel reads as bool, so its ids are 0/1; convert("L") would make them 0/255.
            return np.asarray(out, dtype=np.uint8)
        if out.mode.startswith("I"):
            a = np.asarray(out)
            if a.max(initial=0) > 255 or a.min(initial=0) < 0:
                raise Reject("mask_values", f"mask holds class ids up to {a.max()}; at most 255")
            return a.astype(np.uint8)
        raise Reject(
            "mask_mode",
            f"mask is {out.mode}; masks must be single-channel class ids (L or palette PNG)",
        )
