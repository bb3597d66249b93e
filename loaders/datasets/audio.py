"""AudioDataset: windows (or whole clips) of a `prep audio` dataset, sliced out of the map.

A window of `seconds` starts at a point drawn from (seed, epoch, index) alone
(loaders.augment.random): the same window whatever the batch, the worker or the loader. Each
window is one slice of the clip's samples in the shard's memory map, copied into the batch:
nothing is decoded or resampled at read time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Unpack, cast

import numpy as np
import torch

from loaders.augment.random import stream_key, uniform
from loaders.datasets.base import Remote, ShardedDataset
from loaders.datasets.samples import ArrayReading, SampleBatch
from loaders.fields.audio import Audio
from loaders.fields.base import ragged_batch
from loaders.read.batches import check_indices
from loaders.read.memory import by_shard
from loaders.read.store import DEFAULT_MAX_OPEN

AUDIO = "audio"  # the samples' field (prep.kinds.audio.pack)


class AudioDataset(ShardedDataset):
    """Clips of `root` (packed by `prep audio`) as dict batches.

    With `seconds`, `audio` is a window of round(seconds * rate) samples a clip: int16 (or
    float16) (B, W), or (B, C, W) without --mono, and `audio_len` its samples that are the
    clip's (a shorter clip is padded with zeros to W). The window starts at a point drawn from
    (seed, epoch, index) with `random`, else at the clip's centre. With `seconds=None`, whole
    clips padded to the batch's longest, with `audio_len`. `fields` adds any of the dataset's
    other fields (label, source_rate, start, targets, index); default: label, when there is one.
    """

    dicts = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        seconds: float | None = 1.0,
        seed: int = 0,
        split: str | None = None,
        *,
        fields: Sequence[str] | None = None,
        random: bool = True,
        max_open: int = DEFAULT_MAX_OPEN,
        **remote: Unpack[Remote],
    ):
        super().__init__(root, split=split, max_open=max_open, **remote)
        audio = self.declared.get(AUDIO)
        if not isinstance(audio, Audio):
            raise ValueError(f"{self.store.root} is not an audio dataset (packed by prep audio)")
        self.rate, self.channels, self.mono = audio.rate, audio.channels, audio.mono
        if seconds is not None and round(seconds * self.rate) < 1:
            raise ValueError(f"seconds={seconds} is under one sample at {self.rate} Hz")
        self.window = None if seconds is None else round(seconds * self.rate)
        have = [*self.declared, "index"]
        chosen = (["label"] if "label" in self.declared else []) if fields is None else fields
        missing = [f for f in chosen if f not in have]
        if missing:
            raise ValueError(f"{self.store.root} has no field {missing}; it has {have}")
        if seed < 0:
            raise ValueError(f"seed {seed} must be non-negative")
        # audio (its windows) always, first: what a batch holds, by name (MixedDataset's)
        self.fields = (AUDIO, *(f for f in chosen if f != AUDIO))
        self.seed, self.random = seed, random

    def lengths(self, indices: Sequence[int]) -> np.ndarray:
        """Each clip's length in samples (frames), for bucketing by duration."""
        shard, local = self._locate(indices)
        out = np.empty(len(local), np.int64)
        for s, pos in by_shard(shard):
            off = self.arrays.ragged(s, AUDIO)[1]
            k = local[pos]
            out[pos] = (off[k + 1] - off[k]) // self.channels
        return out

    def starts(self, index: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Each window's first sample: drawn uniformly over the clip (random), else centred."""
        room = np.maximum(lengths - (self.window or 0), 0)
        if not self.random:
            return room // 2
        key = stream_key(self.seed, self.epoch, "AudioDataset")
        u = uniform(key, torch.from_numpy(index), 1)[:, 0].numpy()
        return np.minimum((u * (room + 1)).astype(np.int64), room)

    def __getitems__(self, indices: Sequence[int]) -> SampleBatch:
        self.store.check()  # a repacked folder: refuse it rather than mix two datasets
        index = check_indices(indices, len(self))
        index = np.where(index < 0, index + len(self), index)
        shard, local = self._locate(cast(Sequence[int], index))  # an int64 array passes
        groups = by_shard(shard)
        out: dict[str, Any] = self._windows(index, groups, local)
        reading = ArrayReading(self, groups, local, index)
        for f in self.fields[1:]:
            if f == "index":
                out[f] = torch.from_numpy(index.copy())
                continue
            # each field as its kind reads it (SampleDataset's: text as str, ragged padded)
            got = self.declared[f].read(reading, f, "pad")
            out |= {k: _widened(v) for k, v in got.items()}
        return SampleBatch(out, len(local))

    def _windows(
        self, index: np.ndarray, groups: list[tuple[int, np.ndarray]], local: np.ndarray
    ) -> dict[str, Any]:
        """`audio` (windows, or whole clips padded) and `audio_len` of the batch."""
        c = self.channels
        pieces: list[np.ndarray] = [np.empty(0)] * len(local)
        for s, pos in groups:
            data, off = self.arrays.ragged(s, AUDIO)
            for j in pos.tolist():
                k = int(local[j])
                pieces[j] = data[off[k] : off[k + 1]]
        lens = np.array([len(p) // c for p in pieces], np.int64)
        if self.window is None:
            got = ragged_batch(AUDIO, pieces, () if self.mono else (c,), "pad")
            if not self.mono:  # (B, C, T), contiguous as a model's .view() expects
                got[AUDIO] = got[AUDIO].permute(0, 2, 1).contiguous()
            return got
        w = self.window
        first = self.starts(index, lens)
        dtype = self.store.manifest.arrays[AUDIO].dtype
        buf = np.zeros((len(local), c, w), dtype)  # (B, C, W): channels first, contiguous
        n = np.minimum(lens - first, w)
        for j, p in enumerate(pieces):
            a = int(first[j]) * c
            buf[j, :, : n[j]] = p[a : a + int(n[j]) * c].reshape(-1, c).T
        audio = torch.from_numpy(buf)
        return {AUDIO: audio[:, 0] if self.mono else audio, f"{AUDIO}_len": torch.from_numpy(n)}

    def __repr__(self) -> str:
        return (
            f"AudioDataset({str(self.store.root)!r}, clips={len(self)}, rate={self.rate}, "
            f"window={self.window}, fields={self.fields})"
        )


def _widened(batch: Any) -> Any:
    """uint16, uint32 and uint64 tensors as int64, which torch barely computes with (a source
    rate); anything else as it is."""
    wide = (torch.uint16, torch.uint32, torch.uint64)
    return (
        batch.to(torch.int64) if isinstance(batch, torch.Tensor) and batch.dtype in wide else batch
    )
