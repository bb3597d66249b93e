"""Bad inputs: each becomes a reject with its reason code, or exact pixels by the pixel policy.

A corpus of broken and awkward inputs is built here, file by file; every case asserts either the
reject code or the exact pixels that reach the shard. Nothing may hang, crash or turn grey."""

from __future__ import annotations

import io
import json
import os
import re
import resource
import struct
import zlib
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from helpers import no_hang
from PIL import Image, ImageOps
from typer.testing import CliRunner

from loaders import ImageShardDataset
from loaders.format import iter_rejects, read_manifest
from prep import PrepError
from prep.cli.main import app
from prep.media.image.decode import BACKGROUND, decode_image, decode_mask
from prep.run.inputs import Reject
from prep.sources.images import list_images

# ---------------------------------------------------------------- helpers


def gradient(h: int = 16, w: int = 16) -> np.ndarray:
    """An RGB image whose every pixel differs from its neighbours and whose corners differ."""
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack(
        [xx * 255 // max(1, w - 1), yy * 255 // max(1, h - 1), (xx * 7 + yy * 3) % 256], -1
    ).astype(np.uint8)


def encode(im: Image.Image, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def code_of(path: Path, **kw: Any) -> str:
    with pytest.raises(Reject) as info:
        decode_image(path, **kw)
    return info.value.code


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bomb(w: int, h: int) -> bytes:
    """A valid PNG header claiming w x h RGB pixels, with a few bytes of data."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", idat)
        + png_chunk(b"IEND", b"")
    )


def jpeg_bomb(w: int, h: int) -> bytes:
    data = bytearray(encode(Image.fromarray(gradient()), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", h, w)
    return bytes(data)


def gif_bomb(w: int, h: int) -> bytes:
    data = bytearray(encode(Image.fromarray(gradient()).convert("P"), "GIF"))
    data[6:10] = struct.pack("<HH", w, h)  # the logical screen
    return bytes(data)


def with_exif_orientation(data: bytes, orientation: int) -> bytes:
    """The same JPEG (same compressed pixels) with an EXIF block holding this orientation."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return with_app1(data, exif.tobytes())


def with_app1(data: bytes, payload: bytes) -> bytes:
    """Insert a raw APP1 segment after SOI: a malformed EXIF block."""
    return data[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + data[2:]


# ---------------------------------------------------------------- files that cannot be used


def test_zero_byte_and_not_an_image(tmp_path: Path) -> None:
    assert code_of(write(tmp_path / "empty.jpg", b"")) == "empty"
    assert code_of(write(tmp_path / "notes.jpg", b"hello, not a picture\n" * 20)) == "not_image"
    assert code_of(write(tmp_path / "half.png", b"\x89PNG\r\n\x1a\n")) in ("not_image", "truncated")


def test_decoded_by_content_not_extension(tmp_path: Path) -> None:
    rgb = gradient()
    png_as_jpg = write(tmp_path / "really_png.jpg", encode(Image.fromarray(rgb), "PNG"))
    assert np.array_equal(decode_image(png_as_jpg)[0], rgb)
    jpeg = encode(Image.fromarray(rgb), "JPEG", quality=90)
    as_png = decode_image(write(tmp_path / "really_jpeg.png", jpeg))[0]
    assert np.array_equal(as_png, decode_image(write(tmp_path / "right.jpg", jpeg))[0])


def test_special_files_do_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    (tmp_path / "folder.png").mkdir()
    with no_hang():
        assert code_of(fifo) == "not_file"
        assert code_of(tmp_path / "folder.png") == "not_file"
        assert code_of(tmp_path / "absent.png") == "missing"


def _cuts(data: bytes, start: int, end: int, n: int) -> list[int]:
    return sorted({int(x) for x in np.linspace(start, end, n)} | {len(data) - 1, len(data) - 2})


def _pixel_data(fmt: str, data: bytes) -> tuple[int, int]:
    """Where the compressed pixels start and end: a cut at or after `end` keeps every pixel."""
    if fmt == "JPEG":
        return data.rindex(b"\xff\xda"), data.rindex(b"\xff\xd9")
    if fmt == "PNG":
        first = data.index(b"IDAT") - 4
        last = data.rindex(b"IDAT")
        return first, last + 4 + struct.unpack(">I", data[last - 4 : last])[0]
    if fmt == "GIF":
        return 13, len(data) - 2  # the last sub-block ends before the terminator and trailer
    return 12, len(data)  # WebP, TIFF: every cut loses data


@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("JPEG", {"quality": 90}),
        ("JPEG", {"quality": 90, "progressive": True}),
        ("JPEG", {"quality": 75, "restart_marker_rows": 1}),
        ("JPEG", {"quality": 90, "subsampling": 0}),
        ("PNG", {}),
        ("PNG", {"interlace": 1}),
        ("GIF", {}),
        ("WEBP", {"quality": 80}),
        ("TIFF", {"compression": "tiff_deflate"}),
    ],
    ids=["jpeg", "progressive", "restart", "jpeg444", "png", "interlaced", "gif", "webp", "tiff"],
)
def test_truncated_never_yields_pixels(tmp_path: Path, fmt: str, options: dict[str, Any]) -> None:
    """Cut at many offsets, most inside the entropy-coded data: a Reject every time, unless the
    cut only lost bytes after the last pixel (a PNG's IEND), and then the pixels are all there."""
    yy, xx = np.mgrid[0:120, 0:160]
    rgb = np.stack([xx * 255 // 159, yy * 2, (xx * yy) % 256], -1).astype(np.uint8)
    rgb[30:70, 40:120] = np.random.default_rng(0).integers(0, 256, (40, 80, 3))  # busy data
    im = Image.fromarray(rgb)
    data = encode(im.convert("P") if fmt == "GIF" else im, fmt, **options)
    whole = write(tmp_path / f"whole.{fmt.lower()}", data)
    start, end = _pixel_data(fmt, data)
    for cut in [0, 5, start // 2, *_cuts(data, start, len(data) - 1, 14)]:
        cut_file = write(tmp_path / f"cut.{fmt.lower()}", data[:cut])
        for hint in (None, (32,)):  # full decode, and JPEG's DCT-reduced decode
            try:
                img, _ = decode_image(cut_file, hint)
            except Reject as r:
                assert r.code in ("empty", "truncated", "corrupt", "not_image"), (cut, r.code)
                continue
            assert cut >= end, f"{fmt} cut at {cut} of {len(data)} decoded without error"
            assert np.array_equal(img, decode_image(whole, hint)[0])


def test_decompression_bombs_refused_before_decoding(tmp_path: Path) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    for name, data in [
        ("bomb.png", png_bomb(100_000, 100_000)),
        ("bomb.jpg", jpeg_bomb(65_000, 65_000)),
        ("bomb.gif", gif_bomb(65_535, 65_535)),
    ]:
        path = write(tmp_path / name, data)
        with pytest.raises(Reject) as info:
            decode_image(path, (64,))
        assert info.value.code == "too_large" and "--max-pixels" in info.value.message
    # Decoding any of them would take gigabytes; refusing them took next to nothing.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000
    strip = write(tmp_path / "strip.png", encode(Image.new("RGB", (100_000, 1)), "PNG"))
    with pytest.raises(Reject, match="too elongated for --mode fill at 64 px"):
        decode_image(strip, (64,), mode="fill")  # 64 x 6.4M pixels before the crop
    assert decode_image(strip, (64,), mode="fit")[0].shape == (1, 100_000, 3)
    small = write(tmp_path / "small.png", encode(Image.fromarray(gradient(30, 40)), "PNG"))
    assert code_of(small, max_pixels=1199) == "too_large"  # the limit is the --max-pixels flag
    assert decode_image(small, max_pixels=1200)[0].shape == (30, 40, 3)


# ---------------------------------------------------------------- the pixel policy, exactly


def test_cmyk_to_rgb(tmp_path: Path) -> None:
    cmy = gradient()
    cmyk = np.concatenate([cmy, np.zeros((16, 16, 1), np.uint8)], -1)  # no black ink
    path = write(tmp_path / "cmyk.tif", encode(Image.fromarray(cmyk, "CMYK"), "TIFF"))
    assert np.array_equal(decode_image(path)[0], 255 - cmy)
    # An Adobe (inverted) CMYK JPEG comes out with the right colours, not their negative.
    red = Image.new("CMYK", (16, 16), (0, 255, 255, 0))
    jpeg = decode_image(write(tmp_path / "cmyk.jpg", encode(red, "JPEG", quality=95)))[0]
    assert np.abs(jpeg.astype(int) - [255, 0, 0]).max() <= 3


def test_16_bit_keeps_the_top_byte(tmp_path: Path) -> None:
    values = (np.arange(256, dtype=np.uint16) * 257 + 0x7F).reshape(16, 16)
    path = write(tmp_path / "gray16.png", encode(Image.fromarray(values), "PNG"))
    expected = (values >> 8).astype(np.uint8)
    assert np.array_equal(decode_image(path, gray=True)[0], expected)
    assert np.array_equal(decode_image(path)[0], np.repeat(expected[..., None], 3, -1))
    rgb16 = np.stack([values, values[::-1], values.T], -1)
    path = tmp_path / "rgb16.png"
    assert cv2.imwrite(str(path), rgb16[..., ::-1])  # OpenCV writes 16-bit RGB PNGs (BGR order)
    assert np.array_equal(decode_image(path)[0], (rgb16 >> 8).astype(np.uint8))


def test_palette_and_alpha_composited_on_the_background(tmp_path: Path) -> None:
    rgb = gradient()
    pal = Image.fromarray(rgb).quantize(16)
    expected = np.asarray(pal.convert("RGB"))
    assert np.array_equal(decode_image(write(tmp_path / "p.png", encode(pal, "PNG")))[0], expected)
    # A transparent palette entry shows the background.
    transparent = int(np.asarray(pal)[0, 0])
    path = write(tmp_path / "pt.png", encode(pal, "PNG", transparency=transparent))
    out = decode_image(path)[0]
    hole = np.asarray(pal) == transparent
    assert np.all(out[hole] == BACKGROUND) and np.array_equal(out[~hole], expected[~hole])
    # Alpha 0 shows the background, 255 the colour, and between them a blend of the two.
    alpha = np.zeros((16, 16), np.uint8)
    alpha[:, 8:] = 255
    alpha[:4] = 128
    rgba = np.concatenate([rgb, alpha[..., None]], -1)
    out = decode_image(write(tmp_path / "rgba.png", encode(Image.fromarray(rgba), "PNG")))[0]
    assert np.all(out[4:, :8] == BACKGROUND) and np.array_equal(out[4:, 8:], rgb[4:, 8:])
    blend = (rgb[:4].astype(int) * 128 + np.array(BACKGROUND) * 127) / 255
    assert np.abs(out[:4] - blend).max() <= 1
    la = np.stack([rgb[..., 0], alpha], -1)
    out = decode_image(
        write(tmp_path / "la.png", encode(Image.fromarray(la, "LA"), "PNG")), gray=True
    )[0]
    assert np.all(out[4:, :8] == 255) and np.array_equal(out[4:, 8:], rgb[4:, 8:, 0])


def test_gray_into_rgb_and_back(tmp_path: Path) -> None:
    gray = gradient()[..., 0]
    path = write(tmp_path / "l.png", encode(Image.fromarray(gray, "L"), "PNG"))
    assert np.array_equal(decode_image(path, gray=True)[0], gray)
    assert np.array_equal(decode_image(path)[0], np.repeat(gray[..., None], 3, -1))
    rgb = gradient()
    path = write(tmp_path / "rgb.png", encode(Image.fromarray(rgb), "PNG"))
    luma = (rgb.astype(int) @ [299, 587, 114]) / 1000  # ITU-R 601-2
    out = decode_image(path, gray=True)[0]
    assert out.shape == (16, 16) and np.abs(out - luma).max() <= 1


def test_other_modes_convert(tmp_path: Path) -> None:
    rgb = gradient()
    for mode in ("LAB", "YCbCr", "1", "I", "F"):
        im = (
            Image.fromarray(rgb).convert(mode)
            if mode != "I"
            else Image.fromarray(rgb[..., 0].astype(np.int32) << 8)
        )
        path = write(tmp_path / f"{mode}.tif", encode(im, "TIFF"))
        for gray in (False, True):
            img = decode_image(path, gray=gray)[0]
            assert img.dtype == np.uint8 and img.shape == ((16, 16) if gray else (16, 16, 3))
    i32 = decode_image(tmp_path / "I.tif", gray=True)[0]
    assert np.array_equal(i32, rgb[..., 0])  # 32-bit integers: the 16-bit policy (v >> 8)


ORIENTATIONS = range(1, 9)


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_exif_orientation_same_as_opencv(tmp_path: Path, orientation: int) -> None:
    """Upright pixels, identical to OpenCV's EXIF-applying decoder and to Pillow's own
    exif_transpose; the DCT-reduced decode is the same transform of the stored image."""
    stored = gradient(40, 64)
    plain = encode(Image.fromarray(stored), "JPEG", quality=95)
    path = write(tmp_path / f"o{orientation}.jpg", with_exif_orientation(plain, orientation))
    img, upright = decode_image(path)
    assert upright == img.shape[:2] == ((64, 40) if orientation >= 5 else (40, 64))
    opencv = cv2.imread(str(path), cv2.IMREAD_COLOR)[..., ::-1]
    assert np.array_equal(img, opencv)
    with Image.open(path) as im:
        assert np.array_equal(img, np.asarray(ImageOps.exif_transpose(im).convert("RGB")))
    base = write(tmp_path / "o1.jpg", with_exif_orientation(plain, 1))
    small, _ = decode_image(base, (12,))
    rotated, up = decode_image(path, (12,))
    assert small.shape[:2] == (20, 32) and up == upright  # decoded at 1/2 scale
    assert np.array_equal(
        rotated, np.asarray(ImageOps.exif_transpose(_exif_image(small, orientation)))
    )


# Where the stored image's top-left and top-right corners end up once upright, by the EXIF
# spec's wording of each orientation (row 0 / column 0 of the stored image is the ... side):
# 1 top-left, 2 top-right (mirrored), 3 bottom-right, 4 bottom-left, 5 left-top (transposed),
# 6 right-top (turn 90 clockwise), 7 right-bottom (transverse), 8 left-bottom (90 anticlockwise).
CORNERS = {
    1: ("TL", "TR"),
    2: ("TR", "TL"),
    3: ("BR", "BL"),
    4: ("BL", "BR"),
    5: ("TL", "BL"),
    6: ("TR", "BR"),
    7: ("BR", "TR"),
    8: ("BL", "TL"),
}


def _corner(img: np.ndarray, corner: str, k: int) -> np.ndarray:
    """The k x k block of `img` in a corner ("TL", "BR"...)."""
    rows = slice(0, k) if corner[0] == "T" else slice(img.shape[0] - k, None)
    cols = slice(0, k) if corner[1] == "L" else slice(img.shape[1] - k, None)
    return img[rows, cols]


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_exif_orientation_moves_the_corners(tmp_path: Path, orientation: int, fmt: str) -> None:
    """Ground truth from the EXIF spec, not from another decoder: a red block in the stored
    top-left corner and a green one in the top-right land where the orientation says, for the
    full decode and for JPEG's DCT-reduced one."""
    h, w, k = 48, 80, 16
    stored = np.zeros((h, w, 3), np.uint8)
    stored[:k, :k] = (255, 0, 0)
    stored[:k, -k:] = (0, 255, 0)
    exif = Image.Exif()
    exif[0x0112] = orientation
    options = {"quality": 95} if fmt == "JPEG" else {}
    data = encode(Image.fromarray(stored), fmt, exif=exif.tobytes(), **options)
    path = write(tmp_path / f"o{orientation}.{fmt.lower()}", data)
    red, green = CORNERS[orientation]
    for hint, scale in ((None, 1), ((24,), 2 if fmt == "JPEG" else 1)):
        img, upright = decode_image(path, hint)
        assert upright == ((w, h) if orientation >= 5 else (h, w))
        assert img.shape[:2] == (upright[0] // scale, upright[1] // scale)
        inner = k // scale - 2  # away from the block's edge, where JPEG blurs
        for corner, colour in ((red, (255, 0, 0)), (green, (0, 255, 0))):
            block = _corner(img, corner, inner).astype(int)
            assert np.abs(block - colour).max() <= 24, (orientation, hint, corner)
        others = {"TL", "TR", "BL", "BR"} - {red, green}
        for corner in others:  # the two corners without a block stay black
            assert _corner(img, corner, inner).max() <= 24, (orientation, hint, corner)


def _exif_image(pixels: np.ndarray, orientation: int) -> Image.Image:
    im = Image.fromarray(pixels)
    exif = im.getexif()
    exif[0x0112] = orientation
    im.info["exif"] = exif.tobytes()
    return im


def test_exif_orientation_in_a_png(tmp_path: Path) -> None:
    stored = gradient(10, 16)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = write(tmp_path / "o6.png", encode(Image.fromarray(stored), "PNG", exif=exif.tobytes()))
    img, upright = decode_image(path)
    assert upright == (16, 10) and np.array_equal(img, np.rot90(stored, -1))


@pytest.mark.parametrize(
    "exif",
    [
        b"Exif\0\0" + b"\xde\xad\xbe\xef" * 8,  # not TIFF
        b"Exif\0\0II*\0\xff\xff\xff\x7f",  # the first IFD far past the end
        b"Exif\0\0MM\0*\0\0\0\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x09\x00\x00",  # 9
        b"Exif\0\0II*\0\x08\0\0\0\x01\0\x12\x01\x02\0\x05\0\0\0\x1a\0\0\0\0\0\0\0abcd\0",  # text
        b"Exif\0\0",
    ],
    ids=["garbage", "offset", "orientation9", "string", "empty"],
)
def test_malformed_exif_is_no_orientation(tmp_path: Path, exif: bytes) -> None:
    plain = encode(Image.fromarray(gradient(12, 20)), "JPEG", quality=95)
    expected = decode_image(write(tmp_path / "plain.jpg", plain))[0]
    path = write(tmp_path / "bad.jpg", with_app1(plain, exif))
    small, upright = decode_image(path, (8,))
    assert upright == (12, 20) and small.shape == (12, 20, 3)  # too small to be reduced
    assert np.array_equal(decode_image(path)[0], expected)


@pytest.mark.parametrize(
    ("fmt", "options"), [("GIF", {}), ("PNG", {}), ("WEBP", {"lossless": True})]
)
def test_animation_first_frame(tmp_path: Path, fmt: str, options: dict[str, Any]) -> None:
    frames = [Image.new("RGB", (8, 6), c) for c in [(255, 0, 0), (0, 255, 0), (0, 0, 255)]]
    data = encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=50, **options)
    path = write(tmp_path / f"anim.{fmt.lower()}", data)
    with Image.open(path) as im:
        assert im.n_frames == 3
    img = decode_image(path)[0]
    assert img.shape == (6, 8, 3) and np.all(img == [255, 0, 0])


# ---------------------------------------------------------------- masks


def test_mask_class_ids_by_mode(tmp_path: Path) -> None:
    """A mask's pixel values are class ids: bilevel gives 0/1 (never 0/255), L and palette give
    their values and indices, 16-bit ids up to 255 pass; colour and larger ids are refused."""
    ids = (np.arange(16 * 16) % 7).reshape(16, 16).astype(np.uint8)
    binary = (ids % 2).astype(bool)
    for fmt in ("PNG", "TIFF", "BMP"):
        path = write(tmp_path / f"bilevel.{fmt.lower()}", encode(Image.fromarray(binary), fmt))
        with Image.open(path) as im:
            assert im.mode == "1"
        got = decode_mask(path)
        assert got.dtype == np.uint8 and np.array_equal(got, binary.astype(np.uint8)), fmt
    path = write(tmp_path / "l.png", encode(Image.fromarray(ids, "L"), "PNG"))
    assert np.array_equal(decode_mask(path), ids)
    pal = Image.fromarray(ids, "P")
    pal.putpalette([255 - i for i in range(256)] * 3)  # index, not colour, is the class id
    assert np.array_equal(decode_mask(write(tmp_path / "p.png", encode(pal, "PNG"))), ids)
    wide = write(tmp_path / "16.png", encode(Image.fromarray(ids.astype(np.uint16) * 36), "PNG"))
    assert np.array_equal(decode_mask(wide), ids * 36)
    over = write(
        tmp_path / "300.png", encode(Image.fromarray(np.full((4, 4), 300, np.uint16)), "PNG")
    )
    with pytest.raises(Reject) as info:
        decode_mask(over)
    assert info.value.code == "mask_values"
    rgb = write(tmp_path / "rgb.png", encode(Image.fromarray(gradient()), "PNG"))
    with pytest.raises(Reject) as info:
        decode_mask(rgb)
    assert info.value.code == "mask_mode"


def test_mask_turned_upright_like_its_image(tmp_path: Path) -> None:
    ids = np.zeros((6, 10), np.uint8)
    ids[0, 0] = 3
    exif = Image.Exif()
    exif[0x0112] = 6  # turn 90 degrees clockwise: the stored top-left goes top-right
    path = write(tmp_path / "m.png", encode(Image.fromarray(ids), "PNG", exif=exif.tobytes()))
    got = decode_mask(path)
    assert got.shape == (10, 6) and got[0, 5] == 3 and got.sum() == 3


# ---------------------------------------------------------------- the corpus, packed


def corpus_rejects(root: Path) -> dict[str, str]:
    """The broken inputs of the corpus, written under root: each one's reject code."""
    write(root / "empty.jpg", b"")
    write(root / "text.png", b"just text\n" * 10)
    big = encode(Image.fromarray(gradient(120, 160)), "JPEG", quality=90)
    sos = big.rindex(b"\xff\xda")
    write(root / "truncated.jpg", big[: (sos + len(big)) // 2])
    png = encode(Image.fromarray(gradient(120, 160)), "PNG")
    write(root / "truncated.png", png[: len(png) // 2])
    write(root / os.fsdecode(b"cut-\xff.jpg"), big[: sos + 40])
    write(root / "bomb.png", png_bomb(50_000, 50_000))
    os.mkfifo(root / "pipe.png")
    os.symlink("nowhere.png", root / "broken.png")
    os.symlink("loop.png", root / "loop.png")
    (root / "sub").mkdir()
    os.symlink("..", root / "sub" / "up")  # a folder loop: listed once, no images in sub
    return {
        "empty.jpg": "empty",
        "text.png": "not_image",
        "truncated.jpg": "truncated",
        "truncated.png": "truncated",
        os.fsdecode(b"cut-\xff.jpg"): "truncated",
        "bomb.png": "too_large",
        "pipe.png": "not_file",
        "broken.png": "broken_link",
        "loop.png": "link_loop",
        "sub/up": "link_loop",
    }


def make_corpus(root: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Good and broken inputs side by side (flat folder, 16 x 16 so that packing at 16 px keeps
    every pixel): returns the pixels each good input must pack to, and each reject's code."""
    rgb = gradient()
    good: dict[str, np.ndarray] = {}

    def add(name: str, data: bytes, pixels: np.ndarray | None = None) -> None:
        write(root / name, data)
        good[name] = rgb if pixels is None else pixels

    add("rgb.png", encode(Image.fromarray(rgb), "PNG"))
    add("png named.jpg", encode(Image.fromarray(rgb), "PNG"))
    add("unicode ünï 名前 #1;&'.png", encode(Image.fromarray(rgb[::-1]), "PNG"), rgb[::-1])
    add(os.fsdecode(b"latin1-\xe9.png"), encode(Image.fromarray(rgb[:, ::-1]), "PNG"), rgb[:, ::-1])
    gray = rgb[..., 1]
    add("gray.png", encode(Image.fromarray(gray, "L"), "PNG"), np.repeat(gray[..., None], 3, -1))
    values = gray.astype(np.uint16) * 257
    add("gray16.png", encode(Image.fromarray(values), "PNG"), np.repeat(gray[..., None], 3, -1))
    cmyk = np.concatenate([rgb, np.zeros((16, 16, 1), np.uint8)], -1)
    add("cmyk.tif", encode(Image.fromarray(cmyk, "CMYK"), "TIFF"), 255 - rgb)
    pal = Image.fromarray(rgb).quantize(8)
    add("palette.png", encode(pal, "PNG"), np.asarray(pal.convert("RGB")))
    rgba = np.concatenate([rgb, np.full((16, 16, 1), 255, np.uint8)], -1)
    rgba[:8, :, 3] = 0
    add(
        "alpha.png",
        encode(Image.fromarray(rgba), "PNG"),
        np.where(rgba[..., 3:] == 0, 255, rgb).astype(np.uint8),
    )
    frames = [Image.new("RGB", (16, 16), c) for c in [(0, 0, 255), (255, 0, 0)]]
    add(
        "anim.gif",
        encode(frames[0], "GIF", save_all=True, append_images=frames[1:]),
        np.full((16, 16, 3), [0, 0, 255], np.uint8),
    )
    jpeg = encode(Image.fromarray(rgb), "JPEG", quality=95)
    jpeg_pixels = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))
    add("exif6.jpg", with_exif_orientation(jpeg, 6), np.rot90(jpeg_pixels, -1))
    add("bad exif.jpg", with_app1(jpeg, b"Exif\0\0" + b"\x00" * 40), jpeg_pixels)

    write(root / "readme.txt", b"not an image extension: not an input")
    write(root / ".hidden.png", b"hidden files are not inputs")
    return good, corpus_rejects(root)


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray], dict[str, str]]:
    root = tmp_path / "corpus"
    good, bad = make_corpus(root)
    return root, good, bad


def test_corpus_packs_exact_pixels_and_reject_codes(
    corpus: Any, tmp_path: Path, pack_to: Any
) -> None:
    root, good, bad = corpus
    out = tmp_path / "out"
    with no_hang():
        summary = pack_to(root, out, sizes=[16], shard_size=4, max_rejects=1.0, jobs=2)
    assert (summary.inputs, summary.packed, summary.rejected) == (
        len(good) + len(bad),
        len(good),
        len(bad),
    )
    rejects = list(iter_rejects(out))
    assert {r["path"]: r["reason"] for r in rejects} == bad
    assert all(r["message"] for r in rejects)
    assert [r["path"] for r in rejects] == sorted(r["path"] for r in rejects)
    assert read_manifest(out).rejects == len(bad)
    ds = ImageShardDataset(out, fields=("image", "orig_size"))
    assert len(ds) == len(good)
    for i, name in enumerate(sorted(good)):  # inputs are packed in sorted name order
        image, orig = ds[i]
        assert np.array_equal(image.permute(1, 2, 0).numpy(), good[name]), name
        assert orig.tolist() == [16, 16]


def test_max_rejects_fails_with_the_reasons(corpus: Any, tmp_path: Path) -> None:
    root, good, bad = corpus
    out = tmp_path / "out"
    args = ["pack", str(root), str(out), "--size", "16", "--shard-size", "4", "-j", "1", "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    line = result.output.strip()
    assert len(line.splitlines()) == 1 and line.startswith("error: ")
    n = len(good) + len(bad)
    assert f"{len(bad)} of {n} inputs rejected" in line and "--max-rejects 0.01" in line
    assert "3 truncated" in line and "2 link_loop" in line and "1 too_large" in line
    assert "rejects.jsonl" in line and "HINT" in line
    assert not out.exists()
    # The rejects are there to read, and --resume with a higher limit finishes the run.
    staging = tmp_path / "out.partial"
    assert {r["path"]: r["reason"] for r in iter_rejects(staging)} == bad
    result = CliRunner().invoke(app, [*args, "--resume", "--max-rejects", "0.5"])
    assert result.exit_code == 0, result.output
    assert f"{len(good)} packed, {len(bad)} rejected" in result.output
    assert re.search(r" 5 shards \(5 reused\)", result.output)  # all written by the failed run


def test_rejects_file_with_undecodable_names(corpus: Any, tmp_path: Path, pack_to: Any) -> None:
    root, _, _ = corpus
    out = tmp_path / "out"
    pack_to(root, out, sizes=[16], max_rejects=1.0)
    raw = (out / "rejects.jsonl").read_bytes()
    raw.decode("utf-8")  # valid UTF-8 whatever the file names
    assert "cut-\\udcff.jpg" in raw.decode() and "名前" not in raw.decode()  # only rejects listed
    names = {r["path"] for r in iter_rejects(out)}
    assert os.fsdecode(b"cut-\xff.jpg") in names  # the exact name, back through os.fsencode


def test_listing_order_does_not_change_bytes(
    corpus: Any, tmp_path: Path, pack_to: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus_root, _, _ = corpus
    root = tmp_path / "src"  # class folders, one of them the corpus through a link
    for cls in ("b", "a"):
        write(root / cls / "x.png", encode(Image.fromarray(gradient()), "PNG"))
    os.symlink(corpus_root, root / "c")
    os.symlink(corpus_root, root / "d")  # the same folder twice: the first in sorted order wins
    pack_to(root, tmp_path / "first", sizes=[16], shard_size=3, max_rejects=1.0)

    real_scandir = os.scandir

    class Reversed:
        """os.scandir listing a folder backwards."""

        def __init__(self, path: Any) -> None:
            with real_scandir(path) as it:
                self.entries = iter(sorted(it, key=lambda e: e.name, reverse=True))

        def __enter__(self) -> Reversed:
            return self

        def __exit__(self, *args: Any) -> None:
            pass

        def __iter__(self) -> Reversed:
            return self

        def __next__(self) -> Any:
            return next(self.entries)

    monkeypatch.setattr(os, "scandir", Reversed)
    pack_to(root, tmp_path / "second", sizes=[16], shard_size=3, max_rejects=1.0)
    monkeypatch.undo()
    assert {r["path"]: r["reason"] for r in iter_rejects(tmp_path / "first")}["d"] == "link_loop"
    first, second = sorted((tmp_path / "first").iterdir()), sorted((tmp_path / "second").iterdir())
    assert [p.name for p in first] == [p.name for p in second]
    for a, b in zip(first, second, strict=True):
        if a.name == "manifest.json":
            ma, mb = json.loads(a.read_text()), json.loads(b.read_text())
            ma["config"].pop("out"), mb["config"].pop("out")
            assert ma == mb
        else:
            assert a.read_bytes() == b.read_bytes(), a.name


def test_linked_class_folders_are_followed_once(tmp_path: Path) -> None:
    src, elsewhere = tmp_path / "src", tmp_path / "elsewhere"
    png = encode(Image.fromarray(gradient()), "PNG")
    write(src / "cats" / "1.png", png)
    write(elsewhere / "dogs" / "1.png", png)
    write(elsewhere / "dogs" / "2.png", png)
    os.symlink(elsewhere / "dogs", src / "dogs")  # a class folder that is a link: followed
    os.symlink(elsewhere / "dogs", src / "hounds")  # the same folder again: once only
    os.symlink(src, src / "cats" / "loop")  # a loop back to the top
    with no_hang():
        listing = list_images(src)
    assert [it.rel for it in listing.items] == ["cats/1.png", "dogs/1.png", "dogs/2.png"]
    assert listing.classes == ["cats", "dogs"]
    assert {r["path"]: r["reason"] for r in listing.rejects} == {
        "cats/loop": "link_loop",
        "hounds": "link_loop",
    }


def test_unlistable_folder_is_a_reject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    png = encode(Image.fromarray(gradient()), "PNG")
    write(src / "a" / "1.png", png)
    write(src / "b" / "1.png", png)
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:  # as a folder without read permission (root reads anyway)
        if Path(path) == src / "b":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    listing = list_images(src)
    assert [it.rel for it in listing.items] == ["a/1.png"]
    assert listing.rejects == [
        {"path": "b", "reason": "unreadable", "message": "cannot list: Permission denied"}
    ]


def listed(root: Path, rows: list[tuple[str, str]]) -> Path:
    """root/list.jsonl of these (path, mask) rows, beside an image ok.png and its mask m.png."""
    write(root / "ok.png", encode(Image.fromarray(gradient()), "PNG"))
    write(root / "m.png", encode(Image.new("L", (16, 16), 1), "PNG"))
    lines = [json.dumps({"path": path, "mask": mask}) + "\n" for path, mask in rows]
    return write(root / "list.jsonl", "".join(lines).encode())


def test_list_file_rejects_without_blocking(tmp_path: Path, pack_to: Any) -> None:
    os.mkfifo(tmp_path / "pipe.png")
    os.mkfifo(tmp_path / "pipe-mask.png")
    mask = encode(Image.fromarray(np.arange(120 * 160, dtype=np.uint8).reshape(120, 160)), "PNG")
    write(tmp_path / "cut-mask.png", mask[: len(mask) // 2])
    rows = [
        ("ok.png", "m.png"),
        ("pipe.png", "m.png"),
        ("gone.png", "m.png"),
        ("ok.png", "pipe-mask.png"),
        ("ok.png", "gone-mask.png"),
        ("ok.png", "cut-mask.png"),
    ]
    lst = listed(tmp_path, rows)
    with no_hang():
        summary = pack_to(lst, tmp_path / "out", sizes=[16], max_rejects=1.0)
    assert summary.packed == 1
    reasons = [(r["path"], r["reason"]) for r in iter_rejects(tmp_path / "out")]
    assert reasons == [  # sorted by name; one name's rejects in the list's order
        ("gone.png", "missing"),
        ("ok.png", "mask_not_file"),
        ("ok.png", "mask_missing"),
        ("ok.png", "mask_truncated"),
        ("pipe.png", "not_file"),
    ]


def test_list_paths_no_file_can_have(tmp_path: Path) -> None:
    """A NUL byte or a lone surrogate in a list's path or mask: a reject, never a traceback."""
    rows = [
        ("ok.png", "m.png"),
        ("nul\x00.png", "m.png"),
        ("lone-\ud800.png", "m.png"),
        ("ok.png", "m\x00.png"),
        ("ok.png", "\udfff.png"),
    ]
    lst = listed(tmp_path, rows)
    out = tmp_path / "out"
    args = ["pack", str(lst), str(out), "--size", "16", "--max-rejects", "1", "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 packed, 4 rejected" in result.output
    assert [(r["path"], r["reason"]) for r in iter_rejects(out)] == [
        ("lone-\ud800.png", "bad_path"),
        ("nul\x00.png", "bad_path"),
        ("ok.png", "mask_bad_path"),
        ("ok.png", "mask_bad_path"),
    ]


def test_every_pack_reject_code_is_in_the_readme() -> None:
    root = Path(__file__).resolve().parents[1]
    table = set(re.findall(r"^\| `(\w+)` \|", (root / "docs" / "rejects.md").read_text(), re.M))
    sources = ["media/image/decode.py", "sources/images.py", "kinds/images/pack.py"]
    text = "".join((root / "prep" / f).read_text() for f in [*sources, "run/inputs.py"])
    emitted = set(re.findall(r"(?:Reject\(|reject_record\(\s*[\w.]+,)\s*\"(\w+)\"", text))
    emitted |= set(re.findall(r"return \"(\w+)\"", text))  # os_reject_code's
    assert {"empty", "too_large", "no_class", "bad_label", "bad_path", "link_loop"} <= emitted
    table |= {f"mask_{code}" for code in table}  # the table's `mask_<reason>` row
    assert emitted <= table, f"not in docs/rejects.md's reject codes: {sorted(emitted - table)}"


def test_mask_folder_with_special_files(tmp_path: Path, pack_to: Any) -> None:
    png = encode(Image.fromarray(gradient()), "PNG")
    for name in ("a", "b", "c"):
        write(tmp_path / "src" / f"{name}.png", png)
    write(tmp_path / "masks" / "a.png", encode(Image.new("L", (16, 16), 3), "PNG"))
    os.mkfifo(tmp_path / "masks" / "b.png")
    os.symlink("nowhere.png", tmp_path / "masks" / "c.png")
    with no_hang():
        summary = pack_to(
            tmp_path / "src",
            tmp_path / "out",
            sizes=[16],
            masks=str(tmp_path / "masks"),
            max_rejects=1.0,
        )
    assert summary.packed == 1
    reasons = {r["path"]: r["reason"] for r in iter_rejects(tmp_path / "out")}
    assert reasons == {"b.png": "mask_not_file", "c.png": "mask_broken_link"}


def test_no_usable_input_is_an_error(tmp_path: Path, pack_to: Any) -> None:
    write(tmp_path / "src" / "notes.txt", b"no image extension")
    os.symlink("nowhere.png", tmp_path / "src" / "broken.png")
    with pytest.raises(PrepError, match=r"no usable images in .*src \(1 rejected\)"):
        pack_to(tmp_path / "src", tmp_path / "out", sizes=[16])
    write(tmp_path / "src" / "empty.jpg", b"")  # listed, then rejected when decoded
    with pytest.raises(PrepError, match=r"2 of 2 inputs rejected .*1 broken_link, 1 empty"):
        pack_to(tmp_path / "src", tmp_path / "out", sizes=[16])
