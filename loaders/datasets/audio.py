"""AudioDataset: windows of a `prep audio` dataset, slices of the map (nothing decoded)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Unpack

import numpy as np
import torch

from loaders.augment.random import stream_key, uniform
from loaders.datasets.base import Remote, ShardedDataset
from loaders.datasets.samples import WIDE, ArrayReading, SampleBatch
from loaders.fields.audio import Audio
from loaders.fields.base import ragged_batch

AUDIO = "audio"  # AudioDataset's samples' field (prep.kinds.audio.pack)


class AudioDataset(ShardedDataset):
    """Dict batches: `audio`, a window of round(seconds * rate) samples a clip (B, W), (B, C, W)
    without --mono, from a start drawn from (seed, epoch, index) with `random`, else centred,
    zero-padded, and `audio_len`; `seconds=None`: whole clips. `fields`: others (label).

    Examples:
        >>> from loaders import AudioDataset, make_loader
        >>> ds = AudioDataset("data/demo-audio-packed", seconds=1.0, seed=0)
        >>> batch = next(iter(make_loader(ds, batch_size=4)))
        >>> batch["audio"].shape  # --mono, --rate 16000: one second a window
        torch.Size([4, 16000])
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
        **store: Unpack[Remote],
    ):
        super().__init__(root, split=split, **store)
        audio = self.declared.get(AUDIO)
        if not isinstance(audio, Audio):
            raise ValueError(f"{self.store.root} is not an audio dataset (packed by prep audio)")
        self.rate, self.channels, self.mono = audio.rate, audio.channels, audio.mono
        if seconds is not None and round(seconds * self.rate) < 1:
            raise ValueError(f"seconds={seconds} is under one sample at {self.rate} Hz")
        self.window = None if seconds is None else round(seconds * self.rate)
        chosen = (["label"] if "label" in self.declared else []) if fields is None else fields
        self.check_fields([AUDIO, *chosen], [*self.declared, "index"])
        if seed < 0:
            raise ValueError(f"seed {seed} must be non-negative")
        self.fields = (AUDIO, *(f for f in chosen if f != AUDIO))  # the windows always, first
        self.seed, self.random = seed, random

    def lengths(self, indices: Sequence[int]) -> np.ndarray:
        """Each clip's length in samples (frames), for bucketing by duration."""
        pieces = ArrayReading(self, self._checked(indices)).pieces(AUDIO)  # views: nothing read
        return np.array([len(p) // self.channels for p in pieces], np.int64)

    def starts(self, index: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Each window's first sample: drawn uniformly over the clip (random), else centred."""
        room = np.maximum(lengths - (self.window or 0), 0)
        if not self.random:
            return room // 2
        key = stream_key(self.seed, self.epoch, "AudioDataset")
        u = uniform(key, torch.from_numpy(index), 1)[:, 0].numpy()
        return np.minimum((u * (room + 1)).astype(np.int64), room)

    def __getitems__(self, indices: Sequence[int]) -> SampleBatch:
        index = self._checked(indices)
        reading = ArrayReading(self, index)
        out: dict[str, Any] = self._windows(index, reading.pieces(AUDIO))
        for f in self.fields[1:]:
            if f == "index":
                out[f] = self._index(index)
            else:  # as its kind reads it (SampleDataset's: text as str, ragged padded)
                for k, v in self.declared[f].read(reading, f, "pad").items():
                    out[k] = v.to(torch.int64) if torch.is_tensor(v) and v.dtype in WIDE else v
        return SampleBatch(out, len(index))

    def _windows(self, index: np.ndarray, pieces: list[np.ndarray]) -> dict[str, Any]:
        """`audio` (windows, or whole clips padded) and `audio_len` of the clips `pieces`."""
        c = self.channels
        lens = np.array([len(p) // c for p in pieces], np.int64)
        if self.window is None:
            got = ragged_batch(AUDIO, pieces, () if self.mono else (c,), "pad")
            if not self.mono:  # (B, C, T), contiguous as a model's .view() expects
                got[AUDIO] = got[AUDIO].permute(0, 2, 1).contiguous()
            return got
        w = self.window
        first = self.starts(index, lens)
        dtype = self.store.manifest.arrays[AUDIO].dtype
        buf = np.zeros((len(pieces), c, w), dtype)  # (B, C, W): channels first, contiguous
        n = np.minimum(lens - first, w)
        for j, p in enumerate(pieces):
            a = int(first[j]) * c
            buf[j, :, : n[j]] = p[a : a + int(n[j]) * c].reshape(-1, c).T
        audio = torch.from_numpy(buf)
        return {AUDIO: audio[:, 0] if self.mono else audio, f"{AUDIO}_len": torch.from_numpy(n)}

    def _shown(self) -> dict[str, Any]:
        return {"clips": len(self), "rate": self.rate, "window": self.window, "fields": self.fields}
