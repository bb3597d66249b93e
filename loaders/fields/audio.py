"""The audio field (`prep audio`): a clip's samples, ragged (channels interleaved).
SampleDataset reads whole clips, loaders.AudioDataset windows.

>>> Audio("int16", channels=2, rate=16000, mono=False).arrays("audio")[0].shape
(2,)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, FieldError, Piece, Reading, as_array, ragged_batch, spec
from loaders.format.spec import ArraySpec, count

MAX_RATE, MAX_CHANNELS = 384_000, 64  # a rate of 1e12 once asked a window for TiBs


@dataclass(frozen=True)
class Audio(Field):
    """Clips of `channels` channels at `rate` Hz (`mono`: one, flat); the rest for `prep info`."""

    dtype: str = "int16"
    channels: int = 1
    rate: int = 16000
    mono: bool = True
    max_seconds: float | None = None
    resampler: str | None = None
    kind = "audio"
    ragged = True

    def __post_init__(self) -> None:
        if self.dtype not in ("int16", "float16", "float32"):
            raise ValueError(f"dtype {self.dtype!r} is not int16, float16 or float32")
        if not (count(self.rate) and 1 <= self.rate <= MAX_RATE):
            raise ValueError(f"rate {self.rate!r:.40} is not 1..{MAX_RATE} Hz")
        if not (count(self.channels) and 1 <= self.channels <= MAX_CHANNELS):
            raise ValueError(f"channels {self.channels!r:.40} is not 1..{MAX_CHANNELS}")
        if self.mono and self.channels != 1:
            raise ValueError(f"a mono field has one channel, not {self.channels}")
        cut = self.max_seconds
        if not (cut is None or (isinstance(cut, int | float) and 0 < cut < float("inf"))):
            raise ValueError(f"max_seconds {cut!r:.40} is not null or a duration")

    @property
    def row(self) -> tuple[int, ...]:
        return () if self.mono else (self.channels,)

    def arrays(self, name: str) -> list[ArraySpec]:
        return [spec(name, "audio", self.dtype, self.row, "ragged")]

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        """A clip's samples: (frames,) mono, else (frames, channels), of the field's dtype."""
        clip = as_array(value, np.dtype(self.dtype))
        if clip.ndim != 1 + len(self.row) or clip.shape[1:] != self.row:
            want = ["frames", *self.row]
            raise FieldError("field_shape", f"a clip of shape {list(clip.shape)}, not {want}")
        return {"": clip.reshape(-1)}

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        return ragged_batch(name, batch.pieces(name), self.row, policy)

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        off = arrays.get(name + ".offsets")
        if off is not None and self.channels > 1 and np.any(np.diff(off) % self.channels):
            return [f"a clip of {name} is not whole frames of {self.channels} channels"]
        return []

    def value(self, name: str, piece: Piece, size: int | None) -> np.ndarray:
        return piece(name).reshape(-1, *self.row)

    def caption(self, value: Any) -> str:
        return f"{len(value) / self.rate:.2f} s"

    def lines(self, name: str, m: Any) -> list[str]:
        frames = sum(s.arrays[name].length for s in m.shards) // self.channels
        n, seconds = m.num_samples, frames / self.rate
        cut = f", cut at {self.max_seconds:g} s" if self.max_seconds else ""
        by = f", resampled by {self.resampler}" if self.resampler else ""
        return [
            f"{name}: {n:,} clips, {seconds:,.1f} s ({seconds / max(n, 1):.1f} s a clip) at "
            f"{self.rate} Hz, {self.channels} channel{'s' if self.channels > 1 else ''}, "
            f"{self.dtype}{by}{cut}"
        ]
