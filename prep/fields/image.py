"""The writer's side of the fields that need more than numpy to encode (the others are
loaders.fields' own): images, and the boxes, keypoints and polygons that follow their image's
`geometry` (source x -> x * content_w / w + left; a box cut by fill's crop is clipped).

>>> place_boxes(np.array([[0, 0, 400, 300]], np.float32), (300, 400), 150, "fill").tolist()
[[0.0, 0.0, 150.0, 150.0]]
>>> place_boxes(np.array([[0, 0, 400, 300]], np.float32), (300, 400), 200, "fit").tolist()
[[0.0, 25.0, 200.0, 175.0]]
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from loaders import fields as kinds
from loaders.fields import polygons
from loaders.fields.base import FieldError, as_array
from loaders.format.spec import crc32
from prep.media.image.geometry import PixelSums, combine, encode_jpeg, geometry, sizes_from, stored
from prep.run.inputs import Reject

CV_CHANNELS = 128  # cv2 resizes at most this many channels at a time


def place_xy(xy: np.ndarray, upright: tuple[int, int], size: int, mode: str) -> np.ndarray:
    """float64 (N, 2) points (x, y) of the upright image in the pixels of the sample, unclipped."""
    g = geometry(upright[0], upright[1], size, mode)
    (ch, cw), (top, left) = g.content, g.origin
    out = np.asarray(xy, np.float64).reshape(-1, 2).copy()
    out[:, 0] = out[:, 0] * (cw / upright[1]) + left
    out[:, 1] = out[:, 1] * (ch / upright[0]) + top
    return out


def place_boxes(boxes: np.ndarray, upright: tuple[int, int], size: int, mode: str) -> np.ndarray:
    """float32 (N, 4) boxes in the pixels of the sample, clipped to it."""
    out = place_xy(np.asarray(boxes).reshape(-1, 2), upright, size, mode).reshape(-1, 4)
    h, w = geometry(*upright, size, mode).shape
    out[:, 0::2] = np.clip(out[:, 0::2], 0, w)
    out[:, 1::2] = np.clip(out[:, 1::2], 0, h)
    return out.astype(np.float32)


def place_keypoints(
    points: np.ndarray, upright: tuple[int, int], size: int, mode: str
) -> np.ndarray:
    """float32 (N, K, 3) keypoints (x, y, v) in the sample; outside or v = 0: (0, 0, 0)."""
    pts = np.asarray(points, np.float64).reshape(-1, 3).copy()
    pts[:, :2] = place_xy(pts[:, :2], upright, size, mode)
    h, w = geometry(*upright, size, mode).shape
    x, y = pts[:, 0], pts[:, 1]
    gone = (pts[:, 2] <= 0) | (x < 0) | (y < 0) | (x > w) | (y > h)
    pts[gone] = 0
    return pts.reshape(np.shape(points)).astype(np.float32)


def shown(upright: tuple[int, int], size: int, mode: str) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1): the part of the upright image the sample shows, in its pixels."""
    h, w = geometry(*upright, size, mode).shape
    origin = place_xy(np.zeros((1, 2)), upright, size, mode)[0]
    unit = place_xy(np.array([[upright[1], upright[0]]], np.float64), upright, size, mode)[0]
    scale = (unit - origin) / [upright[1], upright[0]]
    (x0, y0), (x1, y1) = ((np.array([[0, 0], [w, h]], np.float64) - origin) / scale).tolist()
    return max(x0, 0.0), max(y0, 0.0), min(x1, float(upright[1])), min(y1, float(upright[0]))


def kept(
    boxes: np.ndarray, upright: tuple[int, int], sizes: Sequence[int], mode: str
) -> np.ndarray:
    """bool (N,): the boxes left with an area at every one of `sizes`."""
    keep = np.ones(len(boxes), dtype=bool)
    for size in sizes:
        b = place_boxes(boxes, upright, size, mode)
        keep &= (b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])
    return keep


def outside_rows(boxes: np.ndarray, upright: tuple[int, int], slack: float = 1.0) -> np.ndarray:
    """bool (N,): the boxes not x0 <= x1, y0 <= y1 within the image, `slack` px, NaN included."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    h, w = upright
    inside = (b[:, :2] >= -slack).all(axis=1) & (b[:, 2] <= w + slack) & (b[:, 3] <= h + slack)
    return ~(inside & (b[:, 2] >= b[:, 0]) & (b[:, 3] >= b[:, 1]))  # NaN compares False


class Image(kinds.Image):
    """An image from a path, bytes (an encoded file), a PIL image or an (H, W[, C]) uint8 array.

    Examples:
        >>> from prep.fields import Image
        >>> fields = {"image": Image(sizes=(128, 256), codec=("raw", "jpeg"), quality=90)}
    """

    def pixels(self, value: Any) -> tuple[np.ndarray, tuple[int, int]]:
        """Upright pixels (H, W, 3), or (H, W) gray, and the full-size (h, w)."""
        from prep.media.image.decode import decode_image

        if isinstance(value, (str, Path, bytes, bytearray, memoryview)):
            data = Path(value) if isinstance(value, (str, Path)) else io.BytesIO(bytes(value))
            return decode_image(data, self.sizes, self.gray, self.max_pixels, self.mode)
        return _array_pixels(value, self.gray, self.max_pixels)

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        return self.encode_counted(value)[0]

    def encode_counted(self, value: Any) -> tuple[dict[str, np.ndarray], dict[int, np.ndarray]]:
        img, upright = self.pixels(value)
        out: dict[str, np.ndarray] = {"upright": np.asarray(upright, np.int64)}
        specs = {s.size: s for s in self.arrays("") if s.role == "image"}
        pixels = sizes_from(img, upright, list(self.sizes), self.mode, self.pad_value)
        for size, arr in pixels.items():
            data = stored(arr[..., None] if self.gray else arr, specs[size], self.quality)
            out[f"_{size}"] = data
            if self.mode == "keep":
                out[f"_hw_{size}"] = np.asarray(arr.shape[:2], dtype=np.uint16)
            if self.codec_at(size) == "jpeg":
                out[f"_crc_{size}"] = np.asarray(crc32(data.data), dtype=np.uint32)
        return out, pixels

    def counter(self) -> PixelSums:
        return PixelSums()

    def stats(self, records: list[dict[str, Any]]) -> dict[str, Any] | None:
        """`extra.stats[NAME]` (prep.media.image.geometry); None without pixels."""
        got = combine(records)
        return got if got is not None and got["sizes"] else None


def _array_pixels(value: Any, gray: bool, max_pixels: int) -> tuple[np.ndarray, tuple[int, int]]:
    from PIL import Image as PILImage

    if isinstance(value, PILImage.Image):
        value = np.asarray(value.convert("L" if gray else "RGB"))
    if not isinstance(value, np.ndarray) or value.dtype != np.uint8:
        what = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise FieldError(
            "field_type", f"an image is a path, bytes, PIL image or uint8 array, not {what}"
        )
    if value.ndim == 3 and value.shape[2] == 1:
        value = value[..., 0]
    if value.ndim not in (2, 3) or (value.ndim == 3 and value.shape[2] != 3) or 0 in value.shape:
        raise FieldError("field_shape", f"image array of shape {list(value.shape)}; (H, W[, 1|3])")
    if value.shape[0] * value.shape[1] > max_pixels:
        raise FieldError("too_large", f"{value.shape[1]}x{value.shape[0]} pixels; over max_pixels")
    if gray and value.ndim == 3:
        value = np.asarray(PILImage.fromarray(value).convert("L"))
    elif not gray and value.ndim == 2:
        value = np.repeat(value[..., None], 3, axis=2)
    return np.ascontiguousarray(value), (value.shape[0], value.shape[1])


class Mask(kinds.Mask):
    """Class ids of image field `image`, its full size: an L or palette file, or (H, W) uint8.

    Examples:
        >>> from prep.fields import Image, Mask
        >>> fields = {"image": Image(sizes=(256,)), "mask": Mask("image")}  # placed like its image
    """

    def encode_for(self, value: Any, upright: tuple[int, int]) -> dict[str, np.ndarray]:
        from prep.media.image.decode import decode_mask

        if isinstance(value, (str, Path)):
            mask = decode_mask(Path(value))
        elif isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 2:
            mask = value
        else:
            raise FieldError("field_type", "a mask is a file path or an (H, W) uint8 array")
        if mask.shape != tuple(upright):
            raise Reject(
                "mask_size",
                f"mask is {mask.shape[1]}x{mask.shape[0]}, image is {upright[1]}x{upright[0]}",
            )
        masks = sizes_from(mask, upright, list(self.sizes), self.mode, self.pad_value, True)
        ragged = self.mode == "keep"
        return {f"_{s}": m.reshape(-1) if ragged else m for s, m in masks.items()}


class Boxes(kinds.Boxes):
    """Boxes (N, 4) (x0, y0, x1, y1) in field `image`'s upright pixels, or {"xyxy", "hw"}.

    Examples:
        >>> from prep.fields import Boxes, Image, Labels
        >>> fields = {"image": Image(sizes=(256,), mode="keep"), "boxes": Boxes("image"),
        ...           "labels": Labels()}  # boxes move with every size and crop of their image
    """

    def encode_for(self, value: Any, upright: tuple[int, int]) -> dict[str, np.ndarray]:
        if isinstance(value, dict):
            h, w = value.get("hw", (0, 0))
            if (int(h), int(w)) != tuple(upright):
                raise Reject(
                    "box_frame",
                    f"boxes drawn on a {w}x{h} image; it is {upright[1]}x{upright[0]} upright "
                    "(EXIF orientation applied)",
                )
            value = value.get("xyxy")
        boxes = as_array(value, np.dtype("float32"))
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise FieldError("field_shape", f"boxes of shape {list(boxes.shape)}, not (N, 4)")
        bad = np.flatnonzero(outside_rows(boxes, upright))
        if len(bad):
            raise Reject(
                "box_outside",
                f"box {bad[0]} {[round(float(v), 1) for v in boxes[bad[0]]]} is not inside the "
                f"{upright[1]}x{upright[0]} image",
            )
        return {f"_{s}": place_boxes(boxes, upright, s, self.mode).reshape(-1) for s in self.sizes}


class Instances(kinds.Instances):
    """Instance masks (N, H, W) uint8, 0 and 1, at the upright full size of field `image`.

    Examples:
        >>> from prep.fields import Image, Instances, Labels
        >>> fields = {"image": Image(sizes=(256,)), "instances": Instances("image"),
        ...           "labels": Labels()}
    """

    def encode_for(self, value: Any, upright: tuple[int, int]) -> dict[str, np.ndarray]:
        stack = as_array(value, np.dtype("uint8"))
        if stack.ndim != 3 or stack.shape[1:] != tuple(upright):
            raise Reject(
                "mask_size",
                f"instance masks of shape {list(stack.shape)}; the image is (N, {upright[0]}, "
                f"{upright[1]}) upright",
            )
        out: dict[str, list[np.ndarray]] = {f"_{s}": [] for s in self.sizes}
        for i in range(0, len(stack), CV_CHANNELS):
            hwc = np.ascontiguousarray(np.moveaxis(stack[i : i + CV_CHANNELS], 0, -1))
            for s, m in sizes_from(hwc, upright, list(self.sizes), self.mode, 0, True).items():
                out[f"_{s}"].append(np.moveaxis(m.reshape(*m.shape[:2], -1), -1, 0).reshape(-1))
        return {k: np.concatenate(v) if v else np.zeros(0, np.uint8) for k, v in out.items()}


class Keypoints(kinds.Keypoints):
    """Keypoints (N, joints, 3): x, y in field `image`'s upright full-size pixels, COCO's v.

    Examples:
        >>> from prep.fields import Boxes, Image, Keypoints
        >>> fields = {"image": Image(), "boxes": Boxes("image"),
        ...           "points": Keypoints("image", joints=17)}
    """

    def encode_for(self, value: Any, upright: tuple[int, int]) -> dict[str, np.ndarray]:
        points = as_array(value, np.dtype("float32"))
        if points.ndim != 3 or points.shape[1:] != (self.joints, 3):
            raise FieldError(
                "field_shape", f"keypoints of shape {list(points.shape)}, not (N, {self.joints}, 3)"
            )
        if not np.isfinite(points).all():
            raise FieldError("field_nan", "keypoints hold NaN or infinity")
        return {
            f"_{s}": place_keypoints(points, upright, s, self.mode).reshape(-1) for s in self.sizes
        }


class Polygons(polygons.Polygons):
    """Polygons of field `image` in its upright pixels, cut to what every size shows.

    Examples:
        >>> from prep.fields import Image, Labels, Polygons
        >>> fields = {"image": Image(), "polygons": Polygons("image"), "labels": Labels()}
    """

    def encode_for(self, value: Any, upright: tuple[int, int]) -> dict[str, np.ndarray]:
        try:
            polys = [np.asarray(p, np.float64).reshape(-1, 2) for p in value]
        except (TypeError, ValueError) as e:
            raise FieldError("field_shape", f"polygons are lists of (x, y) points ({e})") from None
        if any(len(p) < 3 or not np.isfinite(p).all() for p in polys):
            raise FieldError("field_shape", "a polygon has fewer than 3 finite points")
        x0, y0, x1, y1 = shown(upright, max(self.sizes), self.mode)
        cut = [np.add(polygons.clip(p - [x0, y0], y1 - y0, x1 - x0), [x0, y0]) for p in polys]
        kept = [p for p in cut if len(p) >= 3 and polygons.area(p) > 0]
        xy = np.concatenate(kept) if kept else np.zeros((0, 2))
        out = {"_lens": np.array([len(p) for p in kept], np.int32)}
        for s in self.sizes:
            h, w = geometry(*upright, s, self.mode).shape
            placed = np.clip(place_xy(xy, upright, s, self.mode), 0, [w, h])  # rounding only
            out[f"_{s}"] = placed.astype(np.float32).reshape(-1)
        return out


class Video(kinds.Video):
    """Frames of one video ((h, w, 3) uint8, one shape), back to back, raw or JPEG each."""

    def encode(self, value: Sequence[np.ndarray] | Any) -> dict[str, np.ndarray]:
        frames = list(value)
        if not frames:
            raise FieldError("field_shape", "a video of no frames")
        jpeg = self.codec == "jpeg"
        parts = [encode_jpeg(f, self.quality) if jpeg else f.reshape(-1) for f in frames]
        s = self.size
        return {
            f"_{s}": np.concatenate(parts),
            f"_hw_{s}": np.asarray(frames[0].shape[:2], np.uint16),
            f"_ends_{s}": np.cumsum([len(p) for p in parts], dtype=np.int64),
        }


class Tokens(kinds.Tokens):
    """Token ids of a str by the tokenizer.json `tokenizer`, or ids given as they are.

    Examples:
        >>> from prep.fields import Tokens
        >>> fields = {"text": Tokens("data/demo-tokens/tokenizer.json")}  # tokenized at pack time
    """

    def __init__(self, tokenizer: str | Path, vocab_size: int | None = None):
        path = Path(tokenizer)
        if vocab_size is None:
            vocab_size = _load(str(path.absolute())).get_vocab_size()
        object.__setattr__(self, "tokenizer", str(path.absolute()))
        object.__setattr__(self, "vocab_size", int(vocab_size))

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        if isinstance(value, str):
            value = np.asarray(_load(str(self.tokenizer)).encode(value).ids, dtype=np.int64)
        return super().encode(value)


@lru_cache(maxsize=4)
def _load(path: str) -> Any:
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises its own Exception subclasses
        raise ValueError(f"{path}: not a tokenizer.json ({e})") from None
