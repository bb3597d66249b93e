"""`prep demo --video DIR`: short clips of a moving shape, encoded with PyAV (MPEG-4 Part 2,
FFmpeg's own LGPL encoder), in class folders named by the direction of motion. One clip has a
variable frame rate, one is stored turned and carries the rotation that stands it upright."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

DIRECTIONS = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}
H, W, RATE = 64, 96, 12  # stored frame size and frame rate of the demo clips


def shape_frames(rng: np.random.Generator, direction: str, n: int) -> list[np.ndarray]:
    """n upright (H, W, 3) frames of a square or disc crossing a textured background."""
    dy, dx = DIRECTIONS[direction]
    yy, xx = np.mgrid[0:H, 0:W]
    base = rng.integers(30, 90, size=3)
    background = (base + 20 * np.sin(xx / 7.0)[..., None] + 20 * np.cos(yy / 5.0)[..., None]).clip(
        0, 255
    )
    colour = rng.integers(150, 256, size=3)
    r, disc = int(rng.integers(7, 11)), bool(rng.integers(0, 2))
    y0, x0 = H / 2 - dy * H * 0.3, W / 2 - dx * W * 0.3
    speed = rng.uniform(1.5, 2.5)
    frames = []
    for k in range(n):
        cy, cx = y0 + dy * speed * k + rng.normal(0, 0.3), x0 + dx * speed * k
        inside = (
            (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
            if disc
            else (abs(yy - cy) <= r) & (abs(xx - cx) <= r)
        )
        frames.append(np.where(inside[..., None], colour, background).astype(np.uint8))
    return frames


def write_clip(
    path: Path, frames: list[np.ndarray], times_ms: list[int] | None = None, rotation: int = 0
) -> None:
    """Encode `frames` at RATE fps or at `times_ms`, stored turned clockwise by `rotation`
    with a display matrix that turns them back."""
    import av

    k = (rotation // 90) % 4
    stored = [np.ascontiguousarray(np.rot90(f, -k)) for f in frames]  # clockwise
    with av.open(str(path), "w") as c:
        s = c.add_stream("mpeg4", rate=RATE if times_ms is None else None)
        s.height, s.width = stored[0].shape[:2]
        s.pix_fmt, s.bit_rate = "yuv420p", 1_500_000
        s.codec_context.thread_count = 1  # the same bytes on any machine
        if times_ms is not None:
            s.time_base = s.codec_context.time_base = Fraction(1, 1000)
        if rotation:
            s.set_display_rotation(rotation)
        for j, img in enumerate(stored):
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            if times_ms is not None:
                frame.pts, frame.time_base = times_ms[j], Fraction(1, 1000)
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)


def make_video_demo(out: Path, per_class: int = 3, seed: int = 0) -> list[Path]:
    """`per_class` clips in each direction's folder under `out`; the paths written."""
    rng = np.random.default_rng(seed)
    paths = []
    for c, direction in enumerate(DIRECTIONS):
        (out / direction).mkdir(parents=True, exist_ok=True)
        for j in range(per_class):
            n = int(rng.integers(18, 30))
            frames = shape_frames(rng, direction, n)
            times = None
            if (c, j) == (0, 0):  # variable frame rate: gaps of 40..160 ms
                times = np.cumsum([0, *rng.integers(40, 160, n - 1)]).tolist()
            path = out / direction / f"{direction}_{j:02d}.mp4"
            write_clip(path, frames, times, 90 if (c, j) == (1, 0) else 0)
            paths.append(path)
    return paths
