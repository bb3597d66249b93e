"""prep video: videos decoded once at a fixed frame rate and size, on the run driver
(prep.run.driver) and the one shard writer (prep.run.shardwriter.write_shard).

The dataset is a samples dataset (loaders.fields): one video (or one --max-frames /
--clip-seconds piece of it) a sample, with the fields
- `frames`: a Video field (loaders.fields.video), its frames raw or one JPEG each;
- `label`: the class (class folders, or a list's `label`), when the inputs have one;
- `source`: the video's path relative to SRC;
- `start`: where the sample starts in the video, in seconds;
- `num_frames`, `source_fps`, `duration`: its frame count, the source's average frame rate
  and the source's duration in seconds.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Field, Label, Scalar, Text, Video
from loaders.fields.base import encode_source
from loaders.format import ArraySpec, Manifest, Shard, array_name
from loaders.format.schema import SAMPLES_VERSION
from prep.kinds.video.config import VideoConfig
from prep.media.image.encode import encode_jpeg
from prep.media.video import decode_video
from prep.run.driver import AUTO_MAX, AUTO_SHARDS, Inputs, Kind, RunSummary, run
from prep.run.errors import PrepError
from prep.run.shardwriter import write_shard
from prep.run.tasks import shard_task
from prep.sources.images import Item
from prep.sources.video import list_videos

MIN_VIDEOS = 4  # the fewest videos of an automatic shard
# Per-sample numbers beside the frames: name -> stored dtype.
NUMBERS = {
    "start": "float32",
    "num_frames": "uint32",
    "source_fps": "float32",
    "duration": "float32",
}


def video_fields(cfg: VideoConfig, classes: list[str] | None, labelled: bool) -> dict[str, Any]:
    """The dataset's fields, in manifest order."""
    fields: dict[str, Field] = {
        "frames": Video(cfg.size, cfg.mode, cfg.codec, cfg.fps, cfg.quality)
    }
    if labelled:
        fields["label"] = Label(tuple(classes) if classes else None)
    fields["source"] = Text()
    fields |= {name: Scalar(dtype) for name, dtype in NUMBERS.items()}
    return fields


def encode_video(
    item: Item, cfg: VideoConfig, video: Video, label: str | None
) -> list[dict[str, np.ndarray]]:
    """One video -> its samples (one, or its --max-frames pieces); Reject on bad input."""
    d = decode_video(item.path, cfg.fps, cfg.size, cfg.mode, cfg.max_pixels)
    step = cfg.segment or len(d.frames)
    data, hw, ends = video.names("frames")
    out = []
    for first in range(0, len(d.frames), step):
        frames = d.frames[first : first + step]
        if cfg.codec == "jpeg":
            parts = [encode_jpeg(f, cfg.quality) for f in frames]
        else:
            parts = [f.reshape(-1) for f in frames]
        sample = {
            data: np.concatenate(parts),
            hw: np.asarray(frames[0].shape[:2], np.uint16),
            ends: np.cumsum([len(p) for p in parts], dtype=np.int64),
            "source": encode_source(item.rel),
        }
        values = (first / cfg.fps, len(frames), d.source_fps, d.duration)
        sample |= {k: np.asarray(v, NUMBERS[k]) for k, v in zip(NUMBERS, values, strict=True)}
        if label is not None:
            sample["label"] = np.asarray(item.label, label)
        out.append(sample)
    return out


@shard_task
def video_shard(
    index: int,
    items: list[Item],
    cfg: VideoConfig,
    fields: dict[str, Field],
    specs: dict[str, ArraySpec],
    staging: Path,
) -> dict[str, Any]:
    """The joblib task: videos `items` into shard `index` under `staging`; its record."""
    label = fields["label"].arrays("label")[0].dtype if "label" in fields else None
    video = fields["frames"]
    assert isinstance(video, Video)
    encode = functools.partial(encode_video, cfg=cfg, video=video, label=label)
    return write_shard(index, items, encode, lambda it: it.rel, specs, cfg.format, staging)


class VideoKind(Kind[VideoConfig, list[Item]]):
    """Videos decoded once at --fps and --size, one sample a video (or a piece of one)."""

    name = "samples"
    unit = "video"
    noun = "videos"
    task = staticmethod(video_shard)
    threads = True  # PyAV decodes, OpenCV resizes and libjpeg-turbo encodes without the GIL

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
        self.fields = video_fields(cfg, classes, labelled)
        self.specs = {
            array_name(s.field, s.size): s for n, f in self.fields.items() for s in f.arrays(n)
        }
        seen = []
        for it in items:
            st = it.path.stat()
            seen.append((it.rel, st.st_size, st.st_mtime_ns, it.label))
        self.sizes = {it.rel: s[1] for it, s in zip(items, seen, strict=True)}
        fingerprint = hashlib.sha256(json.dumps([seen, classes]).encode()).hexdigest()
        return Inputs(len(items), rejects, fingerprint)

    def plan(self) -> list[list[Item]]:
        # A video is many images' work: AUTO_SHARDS shards, of at least MIN_VIDEOS videos (the
        # driver's AUTO_MIN of 16 inputs would leave cores idle on a few dozen videos; one a
        # shard made the ~17 files and fsyncs of each shard cost ~10% of a 2-core run).
        count = len(self.items)
        n = self.cfg.shard_size or min(AUTO_MAX, max(MIN_VIDEOS, -(-count // AUTO_SHARDS)))
        return [self.items[i : i + n] for i in range(0, count, n)]

    def cost(self, shard: list[Item]) -> int:
        return sum(self.sizes.get(it.rel, 0) for it in shard)

    def task_args(self, index: int, shard: list[Item], staging: Path) -> tuple[Any, ...]:
        return (index, shard, self.cfg, self.fields, self.specs, staging)

    def manifest(self, records: list[dict[str, Any]]) -> Manifest:
        shards = [Shard.from_dict(rec["shard"]) for rec in records]
        cfg, ends = self.cfg, self.fields["frames"].arrays("frames")[2]
        frames = sum(s.arrays[array_name(ends.field, ends.size)].length for s in shards)
        video = {"fps": cfg.fps, "size": cfg.size, "mode": cfg.mode, "codec": cfg.codec}
        video |= {"frames": frames, "seconds": frames / cfg.fps, "max_frames": cfg.segment}
        return Manifest(
            kind="samples",
            storage=cfg.format,
            arrays=self.specs,
            shards=shards,
            classes=self.classes,
            extra={"fields": {n: f.describe() for n, f in self.fields.items()}, "video": video},
            format_version=SAMPLES_VERSION,
        )


def pack_video(cfg: VideoConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    """Pack cfg.src's videos into cfg.out (prep.run.driver has the guarantees)."""
    return run(VideoKind(cfg), show_progress, profile)
