"""`prep info`'s lines for an audio dataset: its rate, channels, dtype and duration, from the
manifest alone."""

from __future__ import annotations

from loaders.format import Manifest
from prep.inspect.numbers import number, shown


def describe_audio(m: Manifest) -> list[str]:
    """One line, or none for a samples dataset that `prep audio` did not write. A value that is
    not a number where one belongs (a manifest prep did not write) is shown as "?".

    >>> m = Manifest("samples", "npy", {}, [], extra={"audio": {"rate": 16000, "channels": 1,
    ...     "dtype": "int16", "seconds": 90.0, "resampler": "soxr HQ", "max_seconds": None}})
    >>> describe_audio(m)
    ['audio: 0 clips, 90.0 s (0.0 s a clip) at 16000 Hz, 1 channel, int16, resampled by soxr HQ']
    """
    a = m.extra.get("audio")
    if not isinstance(a, dict):
        return []
    n, seconds = m.num_samples, number(a.get("seconds", 0.0), 0)
    each = "?" if seconds is None else f"{seconds / n if n else 0.0:.1f}"
    channels = a.get("channels", 1)
    cut = f", cut at {shown(a['max_seconds'], 'g')} s" if a.get("max_seconds") else ""
    return [
        f"audio: {n:,} clips, {shown(seconds, ',.1f')} s ({each} s a clip) at "
        f"{shown(a.get('rate'), 'g', 1)} Hz, {shown(channels, 'g', 1)} channel"
        f"{'' if channels == 1 else 's'}, {a.get('dtype')}, resampled by "
        f"{a.get('resampler')}{cut}"
    ]
