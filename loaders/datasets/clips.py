"""ClipDataset: clips of `frames` frames read from a `prep video` dataset, no video decoder.

A clip is `frames` stored frames `stride` apart, from a start drawn per (seed, epoch, index)
(training) or at `clips_per_video` evenly spaced starts (evaluation). Its frames are slices of
the shard maps: raw frames are copied (and cropped, resized), JPEG frames decoded on the
loader's threads (loaders.read.decode) or with nvJPEG (`decode="cuda"`,
loaders.read.gpu_decode). The crop box and the flip are drawn once a clip, so every frame of a clip
gets the same ones. A video shorter than the clip repeats its last frame.

    clips = ClipDataset("packed/clips", frames=16, crop=RandomResizedCrop(112), seed=0)
    x, y = clips[[0, 1]]   # uint8 (2, 16, 3, 112, 112), int64 (2,)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import Unpack

import numpy as np
import torch

from loaders.augment.crops import Crop, whole
from loaders.augment.random import stream_key, uniform
from loaders.datasets.base import DecodingDataset, Remote
from loaders.fields.video import Video, frame_pieces
from loaders.read.batches import Batch, check_indices, new_batch
from loaders.read.decode import Job, Places, check_sides, fill, jobs_for
from loaders.read.memory import by_shard
from loaders.read.store import DEFAULT_MAX_OPEN


class ClipDataset(DecodingDataset):
    """Clips (T, C, H, W) uint8 of a `prep video` dataset's Video field `field` (default: the
    first), with the label (int64) when the dataset has one: `ds[indices]` is a Batch of
    (clips (B, T, C, H, W), labels (B,)). Without `clips_per_video`, index i is video i with a
    start drawn from (seed, epoch, i): `set_epoch(e)` draws new ones; with it, index i is clip
    i % clips_per_video of video i // clips_per_video, at evenly spaced starts. `crop` (a
    loaders crop: CenterCrop, RandomResizedCrop) resizes every clip to one shape: needed when
    the frames were packed with mode short or keep (their own shapes). `flip`: mirror each
    clip with probability 1/2, drawn like the crop. `decode="cuda"` decodes JPEG frames with
    nvJPEG into CUDA tensors; raw frames are copied on the CPU whatever `decode` says."""

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
        max_open: int = DEFAULT_MAX_OPEN,
        **remote: Unpack[Remote],
    ):
        super().__init__(root, split=split, max_open=max_open, **remote)
        if frames < 1 or stride < 1 or seed < 0:
            raise ValueError(f"frames {frames}, stride {stride}, seed {seed}: >= 1, >= 1, >= 0")
        if clips_per_video is not None and clips_per_video < 1:
            raise ValueError(f"clips_per_video {clips_per_video} must be at least 1 (or None)")
        if decode not in ("cpu", "cuda"):
            raise ValueError(f"decode={decode!r} is not 'cpu' or 'cuda'")
        fields = self.declared
        videos = [n for n, f in fields.items() if isinstance(f, Video)]
        self.field = field or (videos[0] if videos else "")
        if self.field not in videos:
            raise ValueError(f"{self.store.root} has no video field {field!r}; it has {videos}")
        self.video: Video = fields[self.field]  # type: ignore[assignment]
        if crop is None and self.video.mode in ("short", "keep"):
            raise ValueError(
                f"{self.store.root}: {self.field} was packed with mode {self.video.mode}: each "
                "video has its own frame shape. HINT: pass crop=CenterCrop(112) or "
                "RandomResizedCrop(112) (from loaders)"
            )
        self.labelled = "label" in fields
        self.frames, self.stride, self.crop, self.seed = frames, stride, crop, seed
        self.clips_per_video, self.decode, self.flip, self._threads = (
            clips_per_video,
            decode,
            flip,
            threads,
        )

    @cached_property
    def _names(self) -> tuple[str, str, str]:
        return self.video.names(self.field)

    def __len__(self) -> int:
        return super().__len__() * (self.clips_per_video or 1)

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
        self.store.check()  # a repacked folder: refuse it rather than mix two datasets
        index = np.asarray(indices, dtype=np.int64).reshape(-1)
        index = np.where(index < 0, index + len(self), index)
        shard, local = self._locate((index // (self.clips_per_video or 1)).tolist())
        groups = by_shard(shard)
        data, hw_name, ends_name = self._names
        hw = np.empty((len(local), 2), np.uint16)
        self.gather(hw, hw_name, groups, local)
        hw = hw.astype(np.int64)
        ends, _ = self.arrays.samples(ends_name, groups, local)
        counts = np.array([len(e) for e in ends], dtype=np.int64)
        picks = self.starts(index, counts)[:, None] + self.stride * np.arange(self.frames)
        picks = np.minimum(picks, counts[:, None] - 1)  # a short video: its last frame again
        clips = self._read(data, groups, local, index, hw, ends, picks)
        if not self.labelled:
            return Batch((clips,))
        labels = np.empty(len(local), self.store.manifest.arrays["label"].dtype)
        self.gather(labels, "label", groups, local)
        return Batch((clips, torch.from_numpy(labels.astype(np.int64))))

    def _read(
        self,
        data: str,
        groups: list[tuple[int, np.ndarray]],
        local: np.ndarray,
        index: np.ndarray,
        hw: np.ndarray,
        ends: list[np.ndarray],
        picks: np.ndarray,
    ) -> torch.Tensor:
        """The clips' frames `picks` (B, T) of each video: uint8 (B, T, C, H, W)."""
        b, t = picks.shape
        videos, places = self.arrays.samples(data, groups, local)
        srcs = []
        for video, e, row in zip(videos, ends, picks.tolist(), strict=True):
            pieces = frame_pieces(video, e)
            srcs += [pieces[k] for k in row]
        boxes = whole(hw) if self.crop is None else self.crop.boxes(index, hw, self.epoch)
        out_hw = self.crop.size if self.crop is not None else (self.video.size,) * 2
        rows = [np.repeat(a, t, axis=0) for a in (hw, boxes, places.shard, places.local)]
        where = Places(places.files, rows[2], rows[3], places.source)
        jpeg = self.video.codec == "jpeg"
        if jpeg:  # the frames' headers against their stored sides, before the clips' buffer
            check_sides(srcs, rows[0], None, where, b * t * out_hw[0] * out_hw[1] * 3)
        if self.decode == "cuda" and jpeg:
            from loaders.read.gpu_decode import decode_cuda  # torchvision, imported only here

            out = decode_cuda(srcs, None, rows[0], rows[1], out_hw, 3, where)
            clips = out.reshape(b, t, 3, *out_hw)
            return self._flipped(clips, index, dims=(-1,))
        frames = new_batch((b, t, *out_hw, 3), torch.uint8, self._buffers, self.field)
        flat = frames.numpy().reshape(b * t, *out_hw, 3)
        jobs = jobs_for(flat, srcs, jpeg, rows[0], rows[1], None, where)
        fill(jobs if jpeg else self._copied(flat, srcs, rows[0], rows[1], jobs), self._pool)
        return self._flipped(frames, index, dims=(-2,)).permute(0, 1, 4, 2, 3)

    @staticmethod
    def _copied(
        flat: np.ndarray, srcs: list[np.ndarray], hw: np.ndarray, boxes: np.ndarray, jobs: list[Job]
    ) -> list[Job]:
        """Raw frames whose box is the output's size copied out of the map here (a slice: no
        Job's bookkeeping); the jobs of those left, which resize their box."""
        oh, ow = flat.shape[1:3]
        left_over = []
        for j, (src, (h, w), (top, left, bh, bw)) in enumerate(
            zip(srcs, hw.tolist(), boxes.tolist(), strict=True)
        ):
            if (bh, bw) == (oh, ow):
                flat[j] = src.reshape(h, w, 3)[top : top + bh, left : left + bw]
            else:
                left_over.append(jobs[j])
        return left_over

    def _flipped(self, clips: torch.Tensor, index: np.ndarray, dims: tuple[int]) -> torch.Tensor:
        """`flip`: each clip mirrored left-right (along `dims`) with probability 1/2."""
        if not self.flip:
            return clips
        key = stream_key(self.seed, self.epoch, "RandomHorizontalFlip")
        chosen = (uniform(key, torch.from_numpy(index), 1)[:, 0] < 0.5).tolist()
        for j in (j for j, yes in enumerate(chosen) if yes):
            clips[j] = clips[j].flip(dims)
        return clips

    def source(self, index: int) -> str | None:
        """The video clip `index` was read from, relative to SRC (None: packed without it)."""
        video = int(check_indices([index], len(self))[0]) // (self.clips_per_video or 1)
        return self.store.source(*(int(a[0]) for a in self._locate([video])))

    def __repr__(self) -> str:
        return (
            f"ClipDataset({str(self.store.root)!r}, field={self.field!r}, clips={len(self)}, "
            f"frames={self.frames}, stride={self.stride}, crop={self.crop})"
        )
