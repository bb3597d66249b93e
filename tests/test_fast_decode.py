"""The libjpeg-turbo fast path (prep.media.image.decode): Pillow's pixels, Pillow's policy.

The reference is Pillow itself, as the decoder did before the fast path: `draft` at the same
DCT scale, EXIF orientation by `exif_transpose`, the mode conversion. The bad-input corpus
(tests/test_bad_input.py) checks the policy on broken files; here the fast path must be the one
that decoded each good photo, and refuse what it cannot take."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageOps

from prep.media.image.decode import decode_image, decode_jpeg, draft_scale
from prep.media.image.geometry import geometry, sizes_from
from prep.run.inputs import Reject


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Smooth colour ramps with a busy patch: JPEG's chroma subsampling and DCT have work."""
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack([xx * 255 // (w - 1), yy * 255 // (h - 1), (xx + 2 * yy) % 256], -1)
    rgb[h // 4 : h // 2, w // 4 : w // 2] = np.random.default_rng(seed).integers(0, 256, 3)
    return rgb.astype(np.uint8)


def jpeg(path: Path, pixels: np.ndarray, orientation: int = 1, **options: Any) -> Path:
    im = Image.fromarray(pixels)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    im.save(buf, "JPEG", exif=exif.tobytes(), **options)
    path.write_bytes(buf.getvalue())
    return path


def pillow(path: Path, size: int, gray: bool, mode: str = "fill") -> np.ndarray:
    """The Pillow-only decode of the same file, at the same DCT scale."""
    with Image.open(path) as im:
        orientation = im.getexif().get(0x0112, 1)
        w, h = im.size
        up_h, up_w = (w, h) if orientation >= 5 else (h, w)
        need_h, need_w = geometry(up_h, up_w, size, mode).content
        im.draft("L" if gray else "RGB", (need_h, need_w) if orientation >= 5 else (need_w, need_h))
        out = ImageOps.exif_transpose(im)
        return np.asarray(out.convert("L" if gray else "RGB"))


CASES = [  # (h, w, options): 4:2:0, 4:4:4, progressive, odd sizes that round up when scaled
    (600, 800, {"quality": 90}),
    (601, 803, {"quality": 85, "subsampling": 0}),
    (480, 640, {"quality": 90, "progressive": True}),
    (333, 517, {"quality": 75, "subsampling": 1}),
]


@pytest.mark.parametrize(("h", "w", "options"), CASES)
@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_same_pixels_as_pillow_at_every_scale(
    tmp_path: Path, h: int, w: int, options: dict[str, Any], orientation: int
) -> None:
    path = jpeg(tmp_path / "p.jpg", photo(h, w), orientation, **options)
    upright = (w, h) if orientation >= 5 else (h, w)
    scales = set()
    with Image.open(path) as im:
        for size in (40, 80, 160, 320, 700):
            for gray in (False, True):
                g = geometry(*upright, size, "fill")
                need = g.content[::-1] if orientation < 5 else g.content
                fast = decode_jpeg(im, need, orientation, gray)
                assert fast is not None, "the fast path decodes this JPEG"
                scales.add(draft_scale(im.size, need))
                img, hw = decode_image(path, (size,), gray)
                ref = pillow(path, size, gray)
                assert hw == upright and img.shape == ref.shape == fast.shape
                assert np.array_equal(img, fast)
                # Both are libjpeg-turbo with its default (accurate) IDCT and upsampling: the
                # same bytes here; other builds may round a level apart.
                assert np.abs(img.astype(int) - ref).max() <= 1, (size, gray)
                assert img.flags.c_contiguous
    assert scales == {1, 2, 4, 8}


def test_sizes_match_the_pillow_path(tmp_path: Path) -> None:
    """Through the resize policy too: every size of a multi-size pack from the fast decode."""
    path = jpeg(tmp_path / "p.jpg", photo(900, 1200), 6, quality=90)
    img, upright = decode_image(path, (64, 224))
    ref = pillow(path, 224, False)
    ours = sizes_from(img, upright, [64, 224], "fill", 0)
    theirs = sizes_from(ref, upright, [64, 224], "fill", 0)
    for size in (64, 224):
        assert ours[size].shape == (size, size, 3)
        assert np.abs(ours[size].astype(int) - theirs[size]).max() <= 1


def test_what_the_fast_path_leaves_to_pillow(tmp_path: Path) -> None:
    # CMYK (Adobe's inverted inks): Pillow's colours, not libjpeg-turbo's.
    red = Image.new("CMYK", (64, 48), (0, 255, 255, 0))
    buf = io.BytesIO()
    red.save(buf, "JPEG", quality=95)
    cmyk = tmp_path / "cmyk.jpg"
    cmyk.write_bytes(buf.getvalue())
    with Image.open(cmyk) as im:
        assert decode_jpeg(im, (32, 24), 1, False) is None
    assert np.abs(decode_image(cmyk, (24,))[0].astype(int) - [255, 0, 0]).max() <= 3
    # Truncated: libjpeg-turbo only warns; strict mode raises, and Pillow rejects the file.
    whole = jpeg(tmp_path / "whole.jpg", photo(240, 320), quality=90).read_bytes()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    with Image.open(cut) as im:
        assert decode_jpeg(im, (80, 60), 1, False) is None
    with pytest.raises(Reject) as info:
        decode_image(cut, (60,))
    assert info.value.code == "truncated"
