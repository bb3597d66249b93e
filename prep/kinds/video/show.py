"""`prep info`'s line for a video dataset, from the manifest alone."""

from __future__ import annotations

from loaders.format import Manifest


def describe_video(m: Manifest) -> list[str]:
    """One line, or none for a samples dataset that `prep video` did not write.

    >>> m = Manifest("samples", "npy", {}, [], extra={"video": {"fps": 8.0, "size": 128,
    ...     "mode": "short", "codec": "jpeg", "frames": 960, "seconds": 120.0, "max_frames": 64}})
    >>> describe_video(m)
    ['video: 0 samples, 960 frames (120.0 s) at 8 fps, 128 px (short), jpeg, cut at 64 frames']
    """
    v = m.extra.get("video")
    if not isinstance(v, dict):
        return []
    cut = f", cut at {v['max_frames']} frames" if v.get("max_frames") else ""
    return [
        f"video: {m.num_samples:,} samples, {v.get('frames', 0):,} frames "
        f"({float(v.get('seconds', 0.0)):,.1f} s) at {v.get('fps'):g} fps, {v.get('size')} px "
        f"({v.get('mode')}), {v.get('codec')}{cut}"
    ]
