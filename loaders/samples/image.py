"""Image sample fields, as the reader sees them: `Image` (raw, mode keep's own shapes, or
JPEG, at one or more sizes) and `Mask` (class ids, cropped and resized like its image). The
writer's side (decoding any input, the pixel policy, resizing) is prep.fields.Image's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loaders.format.spec import ArraySpec, array_name
from loaders.samples.fields import Reading, SampleField, sized, spec

MODES = ("fill", "fit", "stretch", "keep")


@dataclass(frozen=True)
class Image(SampleField):
    """An image at each of `sizes` px (`prep pack`'s modes: fill, fit, stretch, keep), stored
    raw (`codec="raw"`; mode keep: ragged, each its own shape) or as JPEG (`quality`). Read as
    uint8 (B, C, H, W); mode keep and crops need the dataset's `crop=`."""

    sizes: tuple[int, ...] = (256,)
    mode: str = "fill"
    codec: str = "raw"
    gray: bool = False
    quality: int = 90
    pad_value: int = 0
    max_pixels: int = 100_000_000
    kind = "image"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(sorted({int(s) for s in self.sizes})))
        if not self.sizes or min(self.sizes) < 1 or max(self.sizes) > 16384:
            raise ValueError(f"sizes {self.sizes} must be 1..16384 px")
        if self.mode not in MODES or self.codec not in ("raw", "jpeg"):
            raise ValueError(f"mode {self.mode!r} / codec {self.codec!r}: {MODES} / raw, jpeg")
        if not 1 <= self.quality <= 100:
            raise ValueError(f"quality {self.quality} must be 1..100")

    @property
    def channels(self) -> int:
        return 1 if self.gray else 3

    def stored_codec(self) -> str:
        return "jpeg" if self.codec == "jpeg" else "ragged" if self.mode == "keep" else "raw"

    def arrays(self, name: str) -> list[ArraySpec]:
        out = []
        for s in self.sizes:
            out.append(sized(name, s, "image", "uint8", (s, s, self.channels), self.stored_codec()))
            if self.mode == "keep":
                out.append(sized(f"{name}_hw", s, "hw", "uint16", (2,), "raw"))
            if self.codec == "jpeg":
                out.append(sized(f"{name}_crc", s, "crc", "uint32", (), "raw"))
        return out

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return {name: batch.images(self, name)}


@dataclass(frozen=True)
class Mask(SampleField):
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


def hw_name(image: str, size: int) -> str:
    """The array of an image field's stored (h, w) at `size` (mode keep)."""
    return array_name(f"{image}_hw", size)


__all__ = ["Image", "Mask", "hw_name", "spec"]
