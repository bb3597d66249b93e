"""The video field (`prep video`): a video's frames, all of one (h, w), raw or one JPEG a frame;
arrays: docs/format.md, "Field kinds". loaders.ClipDataset reads clips of it, SampleDataset
videos."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, Piece, Reading, spec, tensor
from loaders.fields.image import CHECKED_BYTES, decode_jpeg, sides_problem
from loaders.format.spec import MAX_SIDE, VIDEO_MODES, ArraySpec, FormatError, array_name, count

SHOWN = 4  # frames of a video in a preview or report, a strip of tiles


@dataclass(frozen=True)
class Video(Field):
    """Frames at `fps` a second, resized to `size` px by `mode` (short: the shorter side),
    raw or JPEG; read as a list of uint8 (T, C, H, W) tensors. `max_frames`: --max-frames."""

    size: int = 128
    mode: str = "short"
    codec: str = "raw"
    fps: float = 8.0
    quality: int = 90
    max_frames: int | None = None
    kind = "video"
    ragged = True

    def __post_init__(self) -> None:
        if not 1 <= int(self.size) <= 16384 or self.mode not in VIDEO_MODES:
            raise ValueError(f"size {self.size} / mode {self.mode!r}: 1..16384 / {VIDEO_MODES}")
        if self.codec not in ("raw", "jpeg") or not 1 <= self.quality <= 100:
            raise ValueError(f"codec {self.codec!r} / quality {self.quality}: raw, jpeg / 1..100")
        if not 0 < float(self.fps) <= 1000:
            raise ValueError(f"fps {self.fps} must be in (0, 1000]")
        if not (self.max_frames is None or (count(self.max_frames) and self.max_frames > 0)):
            raise ValueError(f"max_frames {self.max_frames!r:.40} is not null or a count")

    def names(self, name: str) -> tuple[str, str, str]:
        """The arrays of the frames' bytes, their (h, w) and their ends."""
        s = self.size
        return array_name(name, s), array_name(f"{name}_hw", s), array_name(f"{name}_ends", s)

    def arrays(self, name: str) -> list[ArraySpec]:
        s, codec = self.size, "jpeg" if self.codec == "jpeg" else "ragged"
        return [
            spec(name, "video", "uint8", (s, s, 3), codec, s),
            spec(f"{name}_hw", "hw", "uint16", (2,), "raw", s),
            spec(f"{name}_ends", "frame_ends", "int64", (), "ragged", s),
        ]

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        data, hw, ends = self.names(name)
        sides = batch.values(hw).astype(np.int64).tolist()
        out = []
        for j, (src, e) in enumerate(zip(batch.pieces(data), batch.pieces(ends), strict=True)):
            try:
                frames = decode_frames(frame_pieces(src, e), tuple(sides[j]), self.codec == "jpeg")
            except FormatError as why:
                at = batch.where(data)[j]
                raise FormatError(f"{at}, {why}. HINT: run `prep verify`, then repack") from None
            out.append(tensor(frames).permute(0, 3, 1, 2))
        return {name: out}

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        """Each video has frames whose ends rise to its byte length (raw: h * w * 3 each)."""
        data, hw, ends = self.names(name)
        eo, do = arrays[ends + ".offsets"], arrays[data + ".offsets"]
        e, counts = arrays[ends], np.diff(eo)
        if len(counts) and counts.min() < 1:
            return [f"a video of {name} has no frames"]
        if not len(counts):
            return []
        first = np.zeros(len(e), bool)
        first[eo[:-1]] = True
        steps = np.where(first, e, e - np.concatenate([[0], e[:-1]]))
        if np.any(steps < 1) or not np.array_equal(e[eo[1:] - 1], np.diff(do)):
            return [f"the frame ends of {name} do not rise to each video's byte length"]
        sides = arrays[hw].astype(np.int64)
        if not self.fits(sides):  # a reader allocates (frames, h, w, 3) from them
            return [f"a frame size of {name} is not one mode {self.mode} stores at {self.size} px"]
        raw = np.repeat(sides[:, 0] * sides[:, 1] * 3, counts)
        if self.codec == "raw" and np.any(steps != raw):
            return [f"a raw frame of {name} is not h * w * 3 bytes"]
        return []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        """The video's frames (T, h, w, 3) uint8."""
        data, hw, ends = self.names(name)
        sides = tuple(int(v) for v in piece(hw))
        return decode_frames(frame_pieces(piece(data), piece(ends)), sides, self.codec == "jpeg")

    def pictures(self, value: Any) -> list[tuple[np.ndarray, str]]:
        """Up to SHOWN frames, evenly spaced from the first to the last, with their times."""
        picked = np.unique(np.linspace(0, len(value) - 1, min(SHOWN, len(value))).round())
        return [(value[int(t)], f"{t / self.fps:.1f} s") for t in picked.tolist()]

    def caption(self, value: Any) -> str:
        return f"({len(value)} frames)"

    def lines(self, name: str, m: Any) -> list[str]:
        frames = sum(s.arrays[self.names(name)[2]].length for s in m.shards)
        cut = f", cut at {self.max_frames} frames" if self.max_frames else ""
        return [
            f"{name}: {m.num_samples:,} videos, {frames:,} frames ({frames / self.fps:,.1f} s) at "
            f"{self.fps:g} fps, {self.size} px ({self.mode}), {self.codec}{cut}"
        ]

    def fits(self, sides: np.ndarray) -> bool:
        """Whether frame sizes (h, w) (N, 2) are ones `prep video` stores at this size and mode."""
        short, long = sides.min(axis=1), sides.max(axis=1)
        if self.mode in ("fill", "fit"):
            return bool(np.all(sides == self.size))
        if self.mode == "keep":
            return bool(np.all(short >= 1) and np.all(long <= self.size))
        return bool(np.all(short == self.size) and np.all(long <= MAX_SIDE))


def frame_pieces(src: np.ndarray, ends: np.ndarray) -> list[np.ndarray]:
    """A video's bytes cut into its frames' bytes (views).

    >>> [p.tolist() for p in frame_pieces(np.arange(5, dtype=np.uint8), np.array([2, 5]))]
    [[0, 1], [2, 3, 4]]
    """
    bounds = [0, *ends.tolist()]
    return [src[a:b] for a, b in itertools.pairwise(bounds)]


def decode_frames(pieces: list[np.ndarray], hw: tuple[int, ...], jpeg: bool) -> np.ndarray:
    """A video's frames (T, h, w, 3) uint8, JPEG headers checked against `hw` before allocating."""
    if jpeg and len(pieces) * hw[0] * hw[1] * 3 >= CHECKED_BYTES:
        found = sides_problem(pieces, np.tile(hw, (len(pieces), 1)))
        if found is not None:
            raise FormatError(f"frame {found[0]}: {found[1]}")
    frames = np.empty((len(pieces), hw[0], hw[1], 3), np.uint8)
    for k, piece in enumerate(pieces):
        try:  # a decoded JPEG is this thread's scratch buffer: copied into frames at once
            frames[k] = (
                decode_jpeg(piece, (hw[0], hw[1]), 1, 3) if jpeg else piece.reshape(hw[0], hw[1], 3)
            )
        except (ValueError, OSError, SyntaxError) as e:
            raise FormatError(f"frame {k}: the frame cannot be decoded ({e})") from None
    return frames
