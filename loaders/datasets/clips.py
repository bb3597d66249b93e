"""ClipDataset: clips of a `prep video` dataset's frames, read from the maps."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Unpack

import numpy as np
import torch

from loaders.augment.crops import Crop, whole
from loaders.augment.random import stream_key, uniform
from loaders.datasets.base import DecodingDataset, Remote
from loaders.datasets.samples import ArrayReading
from loaders.fields.video import Video, frame_pieces
from loaders.read.decode import Pixels
from loaders.read.loader import Batch, check_indices
from loaders.read.store import Places


class ClipDataset(DecodingDataset):
    """Batches (clips uint8 (B, T, C, H, W), labels (B,) when labelled) of `frames` frames
    `stride` apart of Video field `field`: index i is video i from a start drawn from (seed,
    epoch, i), or with `clips_per_video` k clip i % k of video i // k, evenly spaced. `crop`
    (needed for mode short, keep) and `flip` are drawn once a clip; short videos repeat.

    Examples:
        >>> from loaders import CenterCrop, ClipDataset
        >>> ds = ClipDataset("data/demo-clips", frames=8, crop=CenterCrop(48), seed=0)
        >>> clip, label = ds[0]
        >>> clip.shape  # (T, C, H, W)
        torch.Size([8, 3, 48, 48])
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        frames: int = 16,
        stride: int = 1,
        crop: Crop | None = None,
        seed: int = 0,
        clips_per_video: int | None = None,
        decode: str = "cpu",
        split: str | None = None,
        *,
        field: str | None = None,
        flip: bool = False,
        threads: int | None = None,
        **store: Unpack[Remote],
    ):
        super().__init__(root, split=split, crop=crop, decode=decode, threads=threads, **store)
        if frames < 1 or stride < 1 or seed < 0:
            raise ValueError(f"frames {frames}, stride {stride}, seed {seed}: >= 1, >= 1, >= 0")
        if clips_per_video is not None and clips_per_video < 1:
            raise ValueError(f"clips_per_video {clips_per_video} must be at least 1 (or None)")
        videos = [n for n, f in self.declared.items() if isinstance(f, Video)]
        self.field = field or (videos[0] if videos else "")
        if self.field not in videos:
            raise ValueError(f"{self.store.root} has no video field {field!r}; it has {videos}")
        self.video: Video = self.declared[self.field]  # type: ignore[assignment]
        if crop is None and self.video.mode in ("short", "keep"):
            raise ValueError(
                f"{self.store.root}: {self.field} was packed with mode {self.video.mode}: each "
                "video has its own frame shape. HINT: pass crop=CenterCrop(112) or "
                "RandomResizedCrop(112) (from loaders)"
            )
        self.labelled = "label" in self.declared
        self.frames, self.stride, self.seed, self.flip = frames, stride, seed, flip
        self.clips_per_video = clips_per_video

    def __len__(self) -> int:
        return super().__len__() * (self.clips_per_video or 1)

    @property
    def shard_sizes(self) -> list[int]:  # clips, not videos: make_loader's orders cover them all
        return [n * (self.clips_per_video or 1) for n in super().shard_sizes]

    @property
    def read_threads(self) -> int | None:
        """make_loader's reading threads: 2 (one batch's bookkeeping beside another's copy)."""
        return 2 if self.decode == "cpu" else None

    def starts(self, index: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Each clip's first frame, for clip indices `index` of videos of `counts` frames."""
        span = (self.frames - 1) * self.stride + 1
        room = np.maximum(counts - span, 0)
        k = self.clips_per_video
        if k is None:
            key = stream_key(self.seed, self.epoch, "ClipDataset")
            u = uniform(key, torch.from_numpy(index), 1)[:, 0].numpy()
            return np.floor(u * (room + 1)).astype(np.int64)
        j = index % k
        return room // 2 if k == 1 else np.rint(j * room / (k - 1)).astype(np.int64)

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        index = self._checked(indices)
        reading = ArrayReading(self, index, index // (self.clips_per_video or 1))
        data, hw_name, ends_name = self.video.names(self.field)
        hw = reading.values(hw_name).astype(np.int64)
        ends = reading.pieces(ends_name)
        counts = np.array([len(e) for e in ends], dtype=np.int64)
        picks = self.starts(index, counts)[:, None] + self.stride * np.arange(self.frames)
        picks = np.minimum(picks, counts[:, None] - 1)  # a short video: its last frame again
        videos, places = self.arrays.samples(data, reading.groups, reading.local)
        srcs = []
        for video, e, row in zip(videos, ends, picks.tolist(), strict=True):
            pieces = frame_pieces(video, e)
            srcs += [pieces[k] for k in row]
        b, t = picks.shape  # each frame a row of the decoded batch
        boxes = whole(hw) if self.crop is None else self.crop.boxes(index, hw, self.epoch)
        out_hw = self.crop.size if self.crop is not None else (self.video.size,) * 2
        rows = [np.repeat(a, t, axis=0) for a in (hw, boxes, places.shard, places.local)]
        where = Places(places.files, rows[2], rows[3], places.source, places.root)
        jpeg, shape = self.video.codec == "jpeg", (b * t, *out_hw, 3)
        frames = self.pixels(Pixels(srcs, where, jpeg, rows[0], rows[1]), shape, self.field)
        clips = frames.reshape(b, t, 3, *out_hw)  # (B, T, C, H, W)
        if self.flip:  # each clip mirrored left-right with probability 1/2
            key = stream_key(self.seed, self.epoch, "RandomHorizontalFlip")
            chosen = (uniform(key, torch.from_numpy(index), 1)[:, 0] < 0.5).tolist()
            for j in (j for j, yes in enumerate(chosen) if yes):
                clips[j] = clips[j].flip((-1,))
        y = (torch.from_numpy(reading.values("label").astype(np.int64)),) if self.labelled else ()
        return Batch((clips, *y))

    def source(self, index: int) -> str | None:
        """The video clip `index` was read from, relative to SRC (None: packed without it)."""
        clip = int(check_indices([index], len(self))[0])
        return super().source(clip // (self.clips_per_video or 1))

    def _shown(self) -> dict[str, Any]:
        said = dict(field=self.field, clips=len(self), frames=self.frames, stride=self.stride)
        return said | dict(crop=self.crop)
