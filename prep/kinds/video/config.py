"""`prep video` options (prep.run.config has the options every command shares)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from loaders.format import STORAGES
from loaders.format.spec import VIDEO_MODES
from prep.run.config import RunConfig, check, choice, opt


@dataclass
class VideoConfig(RunConfig):
    src: str | None = opt(
        None, "Folder of videos (class sub-folders give labels) or a .csv/.jsonl list."
    )
    fps: float = opt(8.0, "Frames a second to store, picked by timestamp.")
    size: int = opt(128, "Frame size in px (what --mode makes of it).")
    mode: str = opt(
        "short", "short: shorter side to --size | fill: square crop | fit: pad | keep: longer side."
    )
    codec: str = opt("raw", "Frames stored raw (uint8) | jpeg (one JPEG a frame).")
    quality: int = opt(90, "JPEG quality (--codec jpeg).")
    max_frames: int | None = opt(None, "Cut longer videos into samples of at most N frames.")
    clip_seconds: float | None = opt(None, "Cut longer videos into samples of S seconds.")
    max_pixels: int = opt(
        100_000_000, "Refuse larger frames: by the stream's header before decoding, then each."
    )
    shard_size: int | None = opt(None, "Videos per shard (default: from the video count).")
    format: str = opt("npy", "Shard files: npy (one per array) | h5 (one per shard).")

    SECTION: ClassVar[str] = "video"

    def validate(self) -> None:
        super().validate()
        check(0 < self.fps <= 1000, f"--fps {self.fps:g}", "in (0, 1000]")
        check(1 <= self.size <= 16384, f"--size {self.size}", "1..16384 px")
        choice(self.mode, VIDEO_MODES, "--mode")
        choice(self.codec, ("raw", "jpeg"), "--codec")
        check(1 <= self.quality <= 100, f"--quality {self.quality}", "1..100")
        check(self.max_frames is None or self.max_frames >= 1, "--max-frames", "at least 1")
        check(self.clip_seconds is None or self.clip_seconds > 0, "--clip-seconds", "positive")
        check(self.max_pixels >= 1, f"--max-pixels {self.max_pixels}", "at least 1")
        check(self.shard_size is None or self.shard_size >= 1, "--shard-size", "at least 1")
        choice(self.format, STORAGES, "--format")

    @property
    def segment(self) -> int | None:
        """The most frames a sample holds (--max-frames, --clip-seconds), or None: all.

        >>> VideoConfig(fps=8, max_frames=20, clip_seconds=2).segment
        16
        """
        limits = [self.max_frames] if self.max_frames else []
        if self.clip_seconds:
            limits.append(max(1, round(self.clip_seconds * self.fps)))
        return min(limits) if limits else None
