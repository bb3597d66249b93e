"""A video decoded once with PyAV at a fixed frame rate: frames picked by their timestamps,
turned upright by the rotation the file carries, and resized by pack's geometry.

Output frame k shows the source at time k / fps from its first frame: the last source frame
that starts at or before then (what a player shows). So a variable-frame-rate file comes out
right, and a source slower than `fps` repeats frames where a player would hold them. Only the
picked frames are converted to RGB and resized; every frame is decoded (inter-frame codecs
need them). Bad input raises Reject with one of the README's codes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prep.kinds.images.geometry import geometry, place, resize
from prep.run.inputs import Reject, os_reject_code
from prep.run.profile import stage

EPS = 1e-6  # seconds: a frame starting this close after a target time still counts as shown
SLACK = 0.5  # of the header's duration missing at the end (in seconds, at least 2 frames)


@dataclass
class Decoded:
    frames: list[np.ndarray]  # (h, w, 3) uint8 each, upright, all of one shape
    source_fps: float  # the stream's average frame rate
    duration: float  # seconds from the first frame's start to the last one's end
    rotation: int  # degrees counter-clockwise the stored frames were turned to stand upright


def frame_size(h: int, w: int, size: int, mode: str) -> tuple[int, int]:
    """The (h, w) an upright (h, w) frame is stored at.

    >>> frame_size(720, 1280, 128, "short"), frame_size(720, 1280, 128, "fit")
    ((128, 228), (128, 128))
    """
    if mode == "short":
        scale = size / min(h, w)
        return max(1, round(h * scale)), max(1, round(w * scale))
    g = geometry(h, w, size, mode)
    return g.content if mode == "keep" else (size, size)


def fit_frame(rgb: np.ndarray, rotation: int, size: int, mode: str) -> np.ndarray:
    """A decoded (h, w, 3) frame turned upright and resized to how it is stored."""
    img = np.rot90(rgb, k=(rotation // 90) % 4) if rotation % 360 else rgb
    h, w = img.shape[:2]
    if mode == "short":
        return np.ascontiguousarray(resize(np.ascontiguousarray(img), frame_size(h, w, size, mode)))
    g = geometry(h, w, size, mode)
    return place(resize(np.ascontiguousarray(img), g.content), g, 0)


def _open(path: Path) -> Any:
    import av

    try:
        if path.stat().st_size == 0:
            raise Reject("empty", "a zero-byte file")
        return av.open(str(path), metadata_errors="replace")
    except OSError as e:  # vanished, or not ours to read (PyAV's errors for these are OSErrors)
        raise Reject(os_reject_code(e), f"cannot read: {e.strerror or e}") from None
    except (av.error.FFmpegError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or e  # not the errno and the path again
        raise Reject("corrupt", f"not a video FFmpeg can read ({why})") from None


def decode_video(path: Path, fps: float, size: int, mode: str) -> Decoded:
    """`path`'s first video stream at `fps` frames a second, each frame stored by `mode` at
    `size` px (prep.kinds.video.decode.frame_size)."""
    import av

    with stage("read"):
        container = _open(path)
    with container:
        if not container.streams.video:
            kinds = sorted({s.type for s in container.streams}) or ["no"]
            raise Reject("no_video", f"no video stream ({', '.join(kinds)} streams only)")
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate
        if not rate or rate <= 0:
            raise Reject("zero_fps", "the video stream's frame rate is 0")
        stream.thread_type = "AUTO"
        try:
            with stage("decode"):
                out = _pick(_timed(container.decode(stream), float(rate)), fps, size, mode)
        except av.error.FFmpegError as e:
            raise Reject("corrupt", f"the video cannot be decoded ({e.strerror or e})") from None
        frames, duration, rotation, decoded = out
        _check_whole(container, stream, decoded, duration, float(rate))
    if not frames:
        raise Reject("no_frames", "the video ends before its first frame")
    return Decoded(frames, float(rate), duration, rotation)


def _timed(frames: Iterator[Any], rate: float) -> Iterator[tuple[float, float, Any]]:
    """(start, duration, frame) in seconds, from each frame's timestamp (its index / rate where
    the file has none)."""
    for n, frame in enumerate(frames):
        t = frame.time if frame.pts is not None else n / rate
        tb = frame.time_base
        d = float(frame.duration * tb) if frame.duration and tb else 1.0 / rate
        yield float(t), d, frame


def _pick(
    frames: Iterator[tuple[float, float, Any]], fps: float, size: int, mode: str
) -> tuple[list[np.ndarray], float, int, int]:
    """The frames shown at 0, 1 / fps, ... seconds from the first, until the last one ends;
    with the duration, the rotation, and how many frames were decoded."""
    out: list[np.ndarray] = []
    first, shown, end, k, n, rotation = None, None, 0.0, 0, 0, 0
    fitted: tuple[int, np.ndarray] | None = None  # the last frame converted: (its number, pixels)
    moved = False  # whether any frame starts after the first
    for t, d, frame in frames:
        if first is None:
            first, rotation = t, int(getattr(frame, "rotation", 0) or 0)
        rel = t - first
        while shown is not None and k / fps < rel - EPS:  # targets before this frame starts
            fitted = _emit(out, shown, fitted, rotation, size, mode)
            k += 1
        shown, end, n = (n, frame), max(end, rel + d), n + 1
        moved = moved or rel > EPS
    if n > 1 and not moved:
        raise Reject("zero_fps", f"all {n} frames have one timestamp: a frame rate of 0")
    while shown is not None and k / fps < end - EPS:
        fitted = _emit(out, shown, fitted, rotation, size, mode)
        k += 1
    return out, end, rotation, n


def _emit(
    out: list[np.ndarray],
    shown: tuple[int, Any],
    fitted: tuple[int, np.ndarray] | None,
    rotation: int,
    size: int,
    mode: str,
) -> tuple[int, np.ndarray]:
    """Append frame `shown` (number, frame) to `out`, converted once however often it shows.
    A stream whose resolution changes part way keeps its first frame's stored shape."""
    if fitted is None or fitted[0] != shown[0]:
        with stage("resize"):
            rgb = shown[1].to_ndarray(format="rgb24")
            img = fit_frame(rgb, rotation, size, mode)
            if out and img.shape != out[0].shape:
                img = np.ascontiguousarray(resize(img, out[0].shape[:2]))
            fitted = shown[0], img
    out.append(fitted[1])
    return fitted


def _check_whole(container: Any, stream: Any, decoded: int, end: float, rate: float) -> None:
    """A file that ends early (a cut download) is a reject: fewer frames than its header
    counts, or (no count) an end well before the header's duration."""
    if stream.frames and decoded < stream.frames:
        raise Reject("truncated", f"{decoded} of the {stream.frames} frames its header counts")
    if container.duration:
        said = container.duration / 1e6  # av.time_base: microseconds
        if said - end > max(SLACK * said, 2.0 / rate):
            raise Reject("truncated", f"it ends at {end:.2f} s, its header says {said:.2f} s")
