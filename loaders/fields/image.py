"""Image sample fields, as the reader sees them: `Image` (raw, mode keep's own shapes, or
JPEG, at one or more sizes), `Mask` (class ids, cropped and resized like its image) and `Boxes`
(x0, y0, x1, y1 in its image's stored pixels). The writer's side (decoding any input, the pixel
policy, resizing) is prep.fields.Image's.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields import drawing
from loaders.fields.base import Field, Piece, Reading, sized, spec
from loaders.fields.batching import ragged_batch
from loaders.format.spec import MAX_SIDE, ArraySpec, FormatError, array_name
from loaders.format.stats import check_stats

MODES = ("fill", "fit", "stretch", "keep")


@dataclass(frozen=True)
class Image(Field):
    """An image at each of `sizes` px (`prep pack`'s modes: fill, fit, stretch, keep), stored
    raw (`codec="raw"`; mode keep: ragged, each its own shape) or as JPEG (`quality`); `codec`
    may also give one codec a size. Read as uint8 (B, C, H, W); mode keep and crops need the
    dataset's `crop=`. Its pixel statistics (prep.media.image.stats) are the manifest's
    `extra.stats[NAME]`."""

    sizes: tuple[int, ...] = (256,)
    mode: str = "fill"
    codec: str | tuple[str, ...] = "raw"
    gray: bool = False
    quality: int = 90
    pad_value: int = 0
    max_pixels: int = 100_000_000
    kind = "image"

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
        if isinstance(self.codec, str):
            return self.codec
        return self.codec[self.sizes.index(size)]

    def stored_codec(self, size: int) -> str:
        jpeg = self.codec_at(size) == "jpeg"
        return "jpeg" if jpeg else "ragged" if self.mode == "keep" else "raw"

    def arrays(self, name: str) -> list[ArraySpec]:
        out = []
        for s in self.sizes:
            codec = self.stored_codec(s)
            out.append(sized(name, s, "image", "uint8", (s, s, self.channels), codec))
            if self.mode == "keep":
                out.append(sized(f"{name}_hw", s, "hw", "uint16", (2,), "raw"))
            if codec == "jpeg":
                out.append(sized(f"{name}_crc", s, "crc", "uint32", (), "raw"))
        return out

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        jpeg = tuple(s for s in self.sizes if self.codec_at(s) == "jpeg")
        return keep_problems(name, name, self.sizes, self.channels, arrays, jpeg)

    def check_extra(self, name: str, extra: Mapping[str, Any], count: int) -> None:
        stats = extra.get("stats", {})
        if isinstance(stats, dict) and name in stats:
            check_stats(stats[name], f"extra.stats.{name}", self.sizes, None)  # headers judge C

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
        from loaders.read.decode import decode_jpeg

        if zlib.crc32(data.data) != int(piece(array_name(f"{name}_crc", size))):
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
class Mask(Field):
    """Class ids (H, W) uint8 of image field `image`, resized with nearest neighbour and
    cropped or padded exactly like it (its `sizes` and `mode` are the image's)."""

    image: str = "image"
    sizes: tuple[int, ...] = ()
    mode: str = "fill"
    pad_value: int = 0
    kind = "mask"

    def arrays(self, name: str) -> list[ArraySpec]:
        codec = "ragged" if self.mode == "keep" else "raw"
        return [sized(name, s, "mask", "uint8", (s, s), codec) for s in self.sizes]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return {name: batch.images(self, name)}

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        return keep_problems(name, self.image, self.sizes, 1, arrays)

    def needs(self, name: str) -> list[str]:
        return [hw_name(self.image, s) for s in self.sizes] if self.mode == "keep" else []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        size = size or self.sizes[0]
        data = piece(array_name(name, size))
        if self.mode != "keep":
            return data
        return data.reshape(*(int(v) for v in piece(hw_name(self.image, size))))

    def drawn_on(self) -> str | None:
        return self.image

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        return [drawing.blend(p, value) for p in pictures]


@dataclass(frozen=True)
class Boxes(Field):
    """Boxes (N, 4) float32, (x0, y0, x1, y1), in the pixels of image field `image` as stored
    at each of its sizes: resized, cropped and padded with it (its `sizes` and `mode` are the
    image's). Ragged: N boxes a sample, 0 allowed. A load-time `crop=` moves them with the
    pixels and clips them to the crop; the dataset then drops those it leaves under 1 px wide
    or high with their per-box rows, as transforms= does (loaders.datasets.roles)."""

    image: str = "image"
    sizes: tuple[int, ...] = ()
    mode: str = "fill"
    kind = "boxes"
    ragged = True

    def arrays(self, name: str) -> list[ArraySpec]:
        return [sized(name, s, "boxes", "float32", (4,), "ragged") for s in self.sizes]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        pieces = batch.pieces(array_name(name, batch.size or 0))
        crops = batch.crops(self.image)
        if crops is not None:
            pieces = [crop_boxes(p, box, crops[1]) for p, box in zip(pieces, crops[0], strict=True)]
        return ragged_batch(name, pieces, (4,), policy)

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        for s in self.sizes:
            values, off = arrays[array_name(name, s)], arrays.get(array_name(name, s) + ".offsets")
            if off is not None and np.any(np.diff(off) % 4):
                return [f"a sample of {name} at {s} is not whole boxes of 4 numbers"]
            b = values.reshape(-1, 4)
            inside = (b >= 0).all() and (b <= s).all()  # nan fails both
            if not inside or (b[:, 2:] < b[:, :2]).any():
                return [f"a box of {name} at {s} is not x0 <= x1, y0 <= y1 within 0..{s} px"]
        return []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        return piece(array_name(name, size or self.sizes[0])).reshape(-1, 4)

    def drawn_on(self) -> str | None:
        return self.image

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        """Box k outlined in drawing.colour(k), 2 px wide."""
        out = [p.copy() for p in pictures]
        for k, box in enumerate(np.asarray(value, np.float64) * scale):
            for p in out:
                drawing.outline(p, box, drawing.colour(k))
        return out

    def caption(self, value: Any) -> str:
        return f"({len(value)} boxes)"


@dataclass(frozen=True)
class Keypoints(Field):
    """Keypoints (N, `joints`, 3) float32, (x, y, visibility), of image field `image`, in its
    stored pixels at each of its sizes as Boxes are; (0, 0, 0) for a point not labelled or cut
    away by the crop. A load-time `crop=` moves them with the pixels (and zeroes those it cuts)."""

    image: str = "image"
    joints: int = 1
    sizes: tuple[int, ...] = ()
    mode: str = "fill"
    kind = "keypoints"
    ragged = True

    def arrays(self, name: str) -> list[ArraySpec]:
        row = (self.joints, 3)
        return [sized(name, s, "keypoints", "float32", row, "ragged") for s in self.sizes]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        pieces = batch.pieces(array_name(name, batch.size or 0))
        crops = batch.crops(self.image)
        if crops is not None:
            pieces = [
                crop_points(p, box, crops[1]) for p, box in zip(pieces, crops[0], strict=True)
            ]
        return ragged_batch(name, pieces, (self.joints, 3), policy)

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        step = 3 * self.joints
        for s in self.sizes:
            off = arrays.get(array_name(name, s) + ".offsets")
            if off is not None and np.any(np.diff(off) % step):
                return [f"a sample of {name} at {s} is not whole instances of {self.joints} points"]
        return []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        return piece(array_name(name, size or self.sizes[0])).reshape(-1, self.joints, 3)

    def drawn_on(self) -> str | None:
        return self.image

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        """Each instance's labelled points (visibility > 0) in drawing.colour(instance)."""
        out = [p.copy() for p in pictures]
        for k, points in enumerate(np.asarray(value, np.float64)):
            for p in out:
                drawing.dots(p, points[points[:, 2] > 0, :2] * scale, drawing.colour(k))
        return out


def crop_points(flat: np.ndarray, crop: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """Keypoints (flat x, y, v) moved into crop (top, left, height, width) resized to `out_hw`;
    a point outside it, or not labelled, becomes (0, 0, 0).

    >>> crop_points(np.array([10, 20, 2, 5, 5, 1], np.float32), np.array([10, 0, 50, 50]), (25, 25))
    array([5., 5., 2., 0., 0., 0.], dtype=float32)
    """
    top, left, h, w = (float(v) for v in crop)
    p = flat.reshape(-1, 3).astype(np.float64)  # a pipeline's math, as crop_boxes
    p[:, 0] = (p[:, 0] - left) * (out_hw[1] / w)
    p[:, 1] = (p[:, 1] - top) * (out_hw[0] / h)
    gone = (p[:, 2] <= 0) | (p[:, 0] < 0) | (p[:, 1] < 0)
    p[gone | (p[:, 0] > out_hw[1]) | (p[:, 1] > out_hw[0])] = 0
    return p.astype(np.float32).reshape(-1)


def crop_boxes(flat: np.ndarray, crop: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """Boxes (flat x0, y0, x1, y1) moved into crop (top, left, height, width) of their image
    resized to `out_hw`, and clipped to it.

    >>> crop_boxes(np.array([10, 20, 50, 60], np.float32), np.array([0, 10, 100, 100]), (50, 50))
    array([ 0., 10., 20., 30.], dtype=float32)
    """
    top, left, h, w = (float(v) for v in crop)
    # float64, then float32: the very math of a pipeline's crop (Targets.moved), so that crop=
    # and transforms= keep and drop the same boxes (a copy: the map is read-only)
    b = flat.reshape(-1, 4).astype(np.float64)
    b[:, 0::2] = np.clip((b[:, 0::2] - left) * (out_hw[1] / w), 0, out_hw[1])
    b[:, 1::2] = np.clip((b[:, 1::2] - top) * (out_hw[0] / h), 0, out_hw[0])
    return b.astype(np.float32).reshape(-1)


def keep_problems(
    name: str,
    image: str,
    sizes: tuple[int, ...],
    channels: int,
    arrays: Mapping[str, np.ndarray],
    jpeg: tuple[int, ...] = (),
) -> list[str]:
    """Mode keep (an image's samples of their own shapes): each stored side of `image` 1..size,
    and a raw ragged array `name` of its pixels (or mask) h * w * `channels` elements a sample
    (at the sizes not in `jpeg`)."""
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
        if raw and not np.array_equal(np.diff(off), steps):
            return [
                f"the offsets of {name} at {size} do not step by each sample's h * w * {channels}"
            ]
    return []


def hw_name(image: str, size: int) -> str:
    """The array of an image field's stored (h, w) at `size` (mode keep)."""
    return array_name(f"{image}_hw", size)


__all__ = ["Boxes", "Image", "Keypoints", "Mask", "hw_name", "spec"]
