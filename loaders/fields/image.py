"""The image field, the base of the fields placed on one (mask, boxes, keypoints, instances,
polygons), and the jpeg codec's decoding of one sample: libjpeg-turbo through simplejpeg (PIL
where it is missing), strict. Batches: loaders.read.decode; the writer's side: prep.fields."""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, Piece, Reading, spec
from loaders.format.spec import MAX_SIDE, ArraySpec, FormatError, array_name, count, crc32

MODES = ("fill", "fit", "stretch", "keep")
# Moves one sample's flat values into a crop (top, left, height, width) resized to (h, w)
Crop = Callable[[np.ndarray, np.ndarray, tuple[int, int]], np.ndarray]

# JPEG batches this large or more are allocated once the headers agree with the manifest's sides
# (a lie of 16000 px for 32 px files costs B x 768 MB first); below, each decode checks its own.
CHECKED_BYTES = 64 << 20


@dataclass(frozen=True)
class Image(Field):
    """An image at each of `sizes` px by `mode`, raw or JPEG (or a codec a size), read as uint8."""

    sizes: tuple[int, ...] = (256,)
    mode: str = "fill"
    codec: str | tuple[str, ...] = "raw"
    gray: bool = False
    quality: int = 90
    pad_value: int = 0
    max_pixels: int = 100_000_000
    kind = "image"

    def follows(self) -> str | None:
        return "image"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(sorted({int(s) for s in self.sizes})))
        if not self.sizes or min(self.sizes) < 1 or max(self.sizes) > MAX_SIDE:
            raise ValueError(f"sizes {self.sizes} must be 1..{MAX_SIDE} px")
        codecs = (self.codec,) if isinstance(self.codec, str) else tuple(self.codec)
        if len(codecs) not in (1, len(self.sizes)) or not set(codecs) <= {"raw", "jpeg"}:
            raise ValueError(f"codec {self.codec!r}: raw or jpeg, or one of them a size")
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {MODES}")
        if not 1 <= self.quality <= 100:
            raise ValueError(f"quality {self.quality} must be 1..100")

    @property
    def channels(self) -> int:
        return 1 if self.gray else 3

    def codec_at(self, size: int) -> str:
        """The codec of the images at `size`: raw or jpeg."""
        return self.codec if isinstance(self.codec, str) else self.codec[self.sizes.index(size)]

    def arrays(self, name: str) -> list[ArraySpec]:
        out = []
        for s in self.sizes:
            jpeg = self.codec_at(s) == "jpeg"
            codec = "jpeg" if jpeg else "ragged" if self.mode == "keep" else "raw"
            out.append(spec(name, "image", "uint8", (s, s, self.channels), codec, s))
            if self.mode == "keep":
                out.append(spec(f"{name}_hw", "hw", "uint16", (2,), "raw", s))
            if codec == "jpeg":
                out.append(spec(f"{name}_crc", "crc", "uint32", (), "raw", s))
        return out

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        jpeg = tuple(s for s in self.sizes if self.codec_at(s) == "jpeg")
        return keep_problems(name, name, self.sizes, self.channels, arrays, jpeg)

    def check_extra(self, name: str, extra: Mapping[str, Any], count: int) -> None:
        """`extra.stats[NAME]` as Normalize.from_dataset reads it: a split, a mean, std a size."""
        stats = extra.get("stats", {})
        if not isinstance(stats, dict) or name not in stats:
            return
        got, what = stats[name], f"extra.stats.{name}"
        at_sizes = got.get("sizes") if isinstance(got, dict) else None
        split = got.get("split") if isinstance(got, dict) else None
        if not isinstance(at_sizes, dict) or not (split is None or isinstance(split, str)):
            raise FormatError(f"{what} is not a split and sizes")
        stored = {str(s) for s in self.sizes}
        for size, at in at_sizes.items():
            if size not in stored or not _mean_std(at):
                raise FormatError(f"{what} at {size!r:.20} is not a mean and std")

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return {name: batch.images(self, name)}

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        """(h, w, C) uint8 at its stored sides; a JPEG one decoded after its checksum."""
        size = size or self.sizes[0]
        data = piece(array_name(name, size))
        if self.mode != "keep" and self.codec_at(size) == "raw":
            return data
        h, w = (int(v) for v in piece(hw_name(name, size))) if self.mode == "keep" else (size,) * 2
        if self.codec_at(size) == "raw":
            return data.reshape(h, w, self.channels)
        if crc32(data.data) != int(piece(array_name(f"{name}_crc", size))):
            raise FormatError("the JPEG bytes differ from their checksum (bit rot, or a change)")
        try:
            return decode_jpeg(data, (h, w), 1, self.channels).copy()
        except (ValueError, OSError) as e:
            raise FormatError(f"the JPEG cannot be decoded ({e})") from None

    def lines(self, name: str, m: Any) -> list[str]:
        codecs = ", ".join(dict.fromkeys(self.codec_at(s) for s in self.sizes))
        return [
            f"{name}: {'gray' if self.gray else 'RGB'} images at "
            f"{', '.join(map(str, self.sizes))} px, mode {self.mode}, {codecs}"
        ]

    def pictures(self, value: Any) -> list[tuple[np.ndarray, str]]:
        rgb = np.repeat(value, 3, axis=2) if value.shape[2] == 1 else value
        return [(np.ascontiguousarray(rgb), "")]


@dataclass(frozen=True)
class Placed(Field):
    """A field placed on image field `image`, of its `sizes` and `mode`: it follows its crops."""

    image: str = "image"
    sizes: tuple[int, ...] = ()
    mode: str = "fill"
    placed = True

    def follows(self) -> str | None:
        return self.kind

    def drawn_on(self) -> str | None:
        return self.image

    def at(self, name: str, size: int | None) -> str:
        """The field's array at `size` (None: at its first)."""
        return array_name(name, size or self.sizes[0])

    def needs(self, name: str) -> list[str]:
        return [hw_name(self.image, s) for s in self.sizes] if self.mode == "keep" else []

    def cropped(self, batch: Reading, name: str, crop: Crop) -> list[np.ndarray]:
        """The batch's samples at its size, each moved by `crop` into its load-time crop."""
        pieces = batch.pieces(array_name(name, batch.size or 0))
        crops = batch.crops(self.image)
        if crops is None:
            return pieces
        return [crop(p, box, crops[1]) for p, box in zip(pieces, crops[0], strict=True)]


def keep_problems(
    name: str,
    image: str,
    sizes: tuple[int, ...],
    channels: int,
    arrays: Mapping[str, np.ndarray],
    jpeg: tuple[int, ...] = (),
) -> list[str]:
    """Mode keep: each side of `image` 1..size, `name` h * w * `channels` a sample (not `jpeg`)."""
    for size in sizes:
        hw_array = hw_name(image, size)
        if hw_array not in arrays or array_name(name, size) not in arrays:
            continue
        hw = arrays[hw_array].astype(np.int64)
        if len(hw) and (hw.min() < 1 or hw.max() > size):
            return [f"{hw_array}: a side of {image} is not 1..{size} px"]
        off = arrays.get(array_name(name, size) + ".offsets")
        steps = hw[:, 0] * hw[:, 1] * channels
        raw = off is not None and len(off) == len(hw) + 1 and size not in jpeg
        if off is not None and raw and not np.array_equal(np.diff(off), steps):
            return [
                f"the offsets of {name} at {size} do not step by each sample's h * w * {channels}"
            ]
    return []


def hw_name(image: str, size: int) -> str:
    """The array of an image field's stored (h, w) at `size` (mode keep)."""
    return array_name(f"{image}_hw", size)


def _mean_std(at: Any) -> bool:
    """{"mean": [...], "std": [...], "pixels": n}: 1 or 3 finite numbers, stds >= 0, a count."""
    if not isinstance(at, dict) or not count(at.get("pixels")):
        return False
    mean, std = at.get("mean"), at.get("std")
    if not (isinstance(mean, list) and isinstance(std, list) and len(mean) == len(std) in (1, 3)):
        return False
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in mean + std)
    return numbers and all(math.isfinite(x) for x in mean + std) and min(std) >= 0


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


def jpeg_sides(data: np.ndarray) -> tuple[int, int]:
    """(h, w) of the JPEG in `data`, from its header; ValueError or OSError for no JPEG."""
    try:
        import simplejpeg
    except ImportError:  # the fallback decoder's header parse
        from PIL import Image

        with Image.open(io.BytesIO(data.tobytes())) as im:
            return im.height, im.width
    h, w, _, _ = simplejpeg.decode_jpeg_header(data)
    return int(h), int(w)


def sides_problem(srcs: Sequence[np.ndarray], hw: np.ndarray) -> tuple[int, str] | None:
    """The first JPEG of `srcs` whose header is not its (h, w) of `hw`, and how; or None."""
    for j, (src, (h, w)) in enumerate(zip(srcs, hw.tolist(), strict=True)):
        try:
            got = jpeg_sides(src)
        except (ValueError, OSError, SyntaxError) as e:
            return j, f"the JPEG sample cannot be decoded ({e})"
        if got != (h, w):
            return j, f"the JPEG sample is {got[1]}x{got[0]} px, the manifest says {w}x{h}"
    return None
