"""`prep info`'s lines for an audio dataset: its rate, channels, dtype and duration, from the
manifest alone."""

from __future__ import annotations

from loaders.format import Manifest


def describe_audio(m: Manifest) -> list[str]:
    """One line, or none for a samples dataset that `prep audio` did not write.

    >>> m = Manifest("samples", "npy", {}, [], extra={"audio": {"rate": 16000, "channels": 1,
    ...     "dtype": "int16", "seconds": 90.0, "resampler": "soxr HQ", "max_seconds": None}})
    >>> describe_audio(m)
    ['audio: 0 clips, 90.0 s (0.0 s a clip) at 16000 Hz, 1 channel, int16, resampled by soxr HQ']
    """
    a = m.extra.get("audio")
    if not isinstance(a, dict):
        return []
    n, seconds = m.num_samples, float(a.get("seconds", 0.0))
    each = seconds / n if n else 0.0
    channels = int(a.get("channels", 1))
    cut = f", cut at {a['max_seconds']:g} s" if a.get("max_seconds") else ""
    return [
        f"audio: {n:,} clips, {seconds:,.1f} s ({each:.1f} s a clip) at {a.get('rate')} Hz, "
        f"{channels} channel{'s' if channels > 1 else ''}, {a.get('dtype')}, resampled by "
        f"{a.get('resampler')}{cut}"
    ]
