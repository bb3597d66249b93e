"""prep video: videos decoded once at a fixed frame rate and size, on the samples run. A sample a
video (or a --max-frames / --clip-seconds piece): `frames`, `label`, `source`, `start` (seconds),
`num_frames`, and the source's average frame rate and duration (seconds)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from loaders.fields import Field, Label, Scalar
from prep.fields.image import Video
from prep.kinds.video.config import VideoConfig
from prep.media.video import decode_video
from prep.run.driver import run
from prep.run.errors import PrepError
from prep.run.grow import file_identity
from prep.run.kind import Inputs, fingerprint
from prep.run.samples import Sample, SamplesRun
from prep.run.sharding import AUTO_MAX, AUTO_SHARDS
from prep.run.summary import RunSummary
from prep.sources.images import Item, list_videos

MIN_VIDEOS = 4  # the fewest videos of an automatic shard
# Per-sample numbers beside the frames: name -> stored dtype.
NUMBERS = dict(start="float32", num_frames="uint32", source_fps="float32", duration="float32")


def video_samples(item: Item, cfg: VideoConfig, labelled: bool) -> list[Sample]:
    """One video -> its samples (one, or its --max-frames pieces)."""
    decoded, source_fps, duration = decode_video(
        item.path, cfg.fps, cfg.size, cfg.mode, cfg.max_pixels
    )
    step = cfg.segment or len(decoded)
    label = {"label": item.label} if labelled else {}
    out = []
    for first in range(0, len(decoded), step):
        frames = decoded[first : first + step]
        values = (first / cfg.fps, len(frames), source_fps, duration)
        out.append({"frames": frames, **dict(zip(NUMBERS, values, strict=True)), **label})
    return out


class VideoKind(SamplesRun):
    name = "video"
    unit = "video"
    noun = "videos"
    sourced = True
    threads = True  # PyAV decodes, OpenCV resizes and libjpeg-turbo encodes without the GIL
    appendable = True
    grows_classes = True
    cfg: VideoConfig

    def list_inputs(self) -> Inputs:
        cfg = self.cfg
        try:
            import av  # noqa: F401  (the decoder: a missing extra is one line, not a traceback)
        except ImportError as e:
            raise PrepError(f"prep video needs PyAV ({e}). HINT: pip install '.[media]'") from e
        items, classes, rejects = list_videos(Path(str(cfg.src)).absolute(), cfg.limit)
        if not items:
            raise PrepError(
                f"no videos in {cfg.src} ({len(rejects)} rejected). HINT: SRC is a folder of "
                "video files (.mp4, .mkv, .webm, .mov, .avi...), in class sub-folders for labels"
            )
        labelled = all(it.label is not None for it in items)
        self.items, self.classes = items, classes
        fields: dict[str, Field] = {
            "frames": Video(cfg.size, cfg.mode, cfg.codec, cfg.fps, cfg.quality, cfg.segment)
        }
        if labelled:
            fields["label"] = Label(tuple(classes) if classes else None)
        self.declare(fields | {name: Scalar(dtype) for name, dtype in NUMBERS.items()})
        self.make = functools.partial(video_samples, cfg=cfg, labelled=labelled)
        stats = [(it, it.path.stat()) for it in items]
        seen = [(it.rel, st.st_size, st.st_mtime_ns, it.label) for it, st in stats]
        self.sizes = {rel: size for rel, size, _, _ in seen}
        return Inputs(len(items), rejects, fingerprint([seen, classes]))

    def identities(self) -> dict[str, str]:
        """A video's size and time, and its class's name."""
        names = self.classes
        return {it.rel: file_identity(it.path, it.label, names) for it in self.items}

    def plan(self) -> list[list[Any]]:
        # A video is many images' work: the driver's AUTO_MIN of 16 inputs would leave cores
        # idle on a few dozen videos; one a shard made its ~17 files' fsyncs cost ~10%.
        count = len(self.items)
        n = self.cfg.shard_size or min(AUTO_MAX, max(MIN_VIDEOS, -(-count // AUTO_SHARDS)))
        return [self.items[i : i + n] for i in range(0, count, n)]

    def cost(self, shard: list[Item]) -> int:
        return sum(self.sizes.get(it.rel, 0) for it in shard)


def pack_video(cfg: VideoConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    return run(VideoKind(cfg), show_progress, profile)
