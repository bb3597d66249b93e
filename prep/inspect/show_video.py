"""`prep info`'s line for a video dataset, from the manifest alone."""

from __future__ import annotations

from loaders.format import Manifest
from prep.inspect.numbers import shown


def describe_video(m: Manifest) -> list[str]:
    """One line, or none for a samples dataset that `prep video` did not write. A value that is
    not a number where one belongs (a manifest prep did not write) is shown as "?".

    >>> m = Manifest("samples", "npy", {}, [], extra={"video": {"fps": 8.0, "size": 128,
    ...     "mode": "short", "codec": "jpeg", "frames": 960, "seconds": 120.0, "max_frames": 64}})
    >>> describe_video(m)
    ['video: 0 samples, 960 frames (120.0 s) at 8 fps, 128 px (short), jpeg, cut at 64 frames']
    """
    v = m.extra.get("video")
    if not isinstance(v, dict):
        return []
    cut = f", cut at {shown(v['max_frames'], 'g', 1)} frames" if v.get("max_frames") else ""
    return [
        f"video: {m.num_samples:,} samples, {shown(v.get('frames', 0), ',.0f', 0)} frames "
        f"({shown(v.get('seconds', 0.0), ',.1f', 0)} s) at {shown(v.get('fps'), 'g', 0)} fps, "
        f"{v.get('size')} px ({v.get('mode')}), {v.get('codec')}{cut}"
    ]
