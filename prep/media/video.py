"""A video decoded once with PyAV at a fixed frame rate, turned upright, resized by pack's
geometry; bad input raises Reject (docs/rejects.md). Frame k is the last source frame starting at
or before k / fps (what a player shows: variable frame rates come out right). A file's cost is
bounded: frames over `max_pixels` are refused, the frames picked may not outrun the file."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from prep.media.image.geometry import geometry, place, resize
from prep.run.inputs import Reject, os_reject_code
from prep.run.profile import stage

EPS = 1e-6  # seconds: a frame starting this close after a target time still counts as shown
SLACK = 0.5  # of the header's duration missing at the end (in seconds, at least 2 frames)
# Stored frames a decoded frame may fill, on average (a slideshow of 8 s a picture at --fps 8);
# past that, a gap in the timestamps would be repeats that cost bytes the file never paid for.
REPEAT = 64
MAX_PIXELS = 100_000_000  # a frame's default cap, as prep pack's --max-pixels


def rgb(frame: Any) -> np.ndarray:
    """A decoded frame as RGB (h, w, 3) uint8, converted on this thread: PyAV 18.1.1's default
    converts on a pool of threads made once, which a forked process (a DataLoader worker) lacks
    and waits for forever."""
    return frame.to_ndarray(format="rgb24", threads=1)


def frame_size(h: int, w: int, size: int, mode: str) -> tuple[int, int]:
    """The (h, w) an upright (h, w) frame is stored at.

    >>> frame_size(720, 1280, 128, "short"), frame_size(720, 1280, 128, "fit")
    ((128, 228), (128, 128))
    """
    if mode == "short":
        scale = size / min(h, w)
        return max(1, round(h * scale)), max(1, round(w * scale))
    return geometry(h, w, size, mode).shape


def fit_frame(rgb: np.ndarray, rotation: int, size: int, mode: str) -> np.ndarray:
    """A decoded (h, w, 3) frame turned upright and resized to how it is stored."""
    img = np.ascontiguousarray(np.rot90(rgb, k=(rotation // 90) % 4) if rotation % 360 else rgb)
    h, w = img.shape[:2]
    if mode == "short":
        return np.ascontiguousarray(resize(img, frame_size(h, w, size, mode)))
    g = geometry(h, w, size, mode)
    return place(resize(img, g.content), g, 0)


def decode_video(
    path: Path, fps: float, size: int, mode: str, max_pixels: int = MAX_PIXELS
) -> tuple[list[np.ndarray], float, float]:
    """(frames (h, w, 3) uint8 upright at `fps`, sized by `frame_size`; the stream's average
    rate; seconds from the first frame's start to the last one's end)."""
    import av

    with stage("read"):
        try:
            if path.stat().st_size == 0:
                raise Reject("empty", "a zero-byte file")
            container = av.open(str(path), metadata_errors="replace")
        except OSError as e:  # vanished, or not ours to read (PyAV raises OSErrors for these)
            raise Reject(os_reject_code(e), f"cannot read: {e.strerror or e}") from None
        except (av.error.FFmpegError, UnicodeDecodeError) as e:
            why = getattr(e, "strerror", None) or e  # not the errno and the path again
            raise Reject("corrupt", f"not a video FFmpeg can read ({why})") from None
    with container:
        if not container.streams.video:
            kinds = sorted({str(s.type) for s in container.streams}) or ["no"]
            raise Reject("no_video", f"no video stream ({', '.join(kinds)} streams only)")
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate
        if not rate or rate <= 0:
            raise Reject("zero_fps", "the video stream's frame rate is 0")
        ctx = stream.codec_context
        _check_pixels(ctx.width or 0, ctx.height or 0, max_pixels, "its header gives frames of")
        said = container.duration / 1e6 if container.duration else None  # av.time_base: us
        stream.thread_type = "AUTO"
        try:
            with stage("decode"):
                timed = _timed(container.decode(stream), float(rate), max_pixels)
                frames, duration, decoded = _pick(timed, fps, size, mode, said)
        except av.error.FFmpegError as e:
            raise Reject("corrupt", f"the video cannot be decoded ({e.strerror or e})") from None
        if stream.frames and decoded < stream.frames:  # a file that ends early
            raise Reject("truncated", f"{decoded} of the {stream.frames} frames its header counts")
        if said and said - duration > max(SLACK * said, 2.0 / float(rate)):
            raise Reject("truncated", f"it ends at {duration:.2f} s, its header says {said:.2f} s")
    if not frames:
        raise Reject("no_frames", "the video ends before its first frame")
    return frames, float(rate), duration


def _check_pixels(w: int, h: int, max_pixels: int, what: str) -> None:
    if w * h > max_pixels:
        raise Reject(
            "too_large",
            f"{what} {w}x{h} = {w * h:,} pixels, over --max-pixels {max_pixels:,}. "
            "HINT: raise --max-pixels if the file is trusted",
        )


def _timed(
    frames: Iterator[Any], rate: float, max_pixels: int
) -> Iterator[tuple[float, float, Any]]:
    """(start, duration, frame) in seconds; a frame over `max_pixels` refused when decoded."""
    for n, frame in enumerate(frames):
        _check_pixels(frame.width, frame.height, max_pixels, f"frame {n} is")
        t = frame.time if frame.pts is not None else n / rate
        tb = frame.time_base
        d = float(frame.duration * tb) if frame.duration and tb else 1.0 / rate
        yield float(t), d, frame


def _pick(
    frames: Iterator[tuple[float, float, Any]], fps: float, size: int, mode: str, said: float | None
) -> tuple[list[np.ndarray], float, int]:
    """The frames shown at 0, 1 / fps, ... s until the last ends; duration, frames decoded."""
    out: list[np.ndarray] = []
    first, shown, end, k, n, rotation = None, None, 0.0, 0, 0, 0
    fitted: tuple[int, np.ndarray] | None = None  # the last frame converted: (its number, pixels)
    moved = False  # whether any frame starts after the first

    def show_until(reach: float) -> None:
        """Store `shown`, converted once, at each time before `reach`, in the first's shape."""
        nonlocal k, fitted
        if shown is None:
            return
        _check_reach(reach, k, n, fps, said)
        while k / fps < reach - EPS:
            if fitted is None or fitted[0] != shown[0]:
                with stage("resize"):
                    img = fit_frame(rgb(shown[1]), rotation, size, mode)
                    if out and img.shape != out[0].shape:
                        img = np.ascontiguousarray(resize(img, out[0].shape[:2]))
                    fitted = shown[0], img
            out.append(fitted[1])
            k += 1

    for t, d, frame in frames:
        if first is None:
            first, rotation = t, int(getattr(frame, "rotation", 0) or 0)
        rel = t - first
        show_until(rel)
        shown, end, n = (n, frame), max(end, rel + d), n + 1
        moved = moved or rel > EPS
    if n > 1 and not moved:
        raise Reject("zero_fps", f"all {n} frames have one timestamp: a frame rate of 0")
    show_until(end)
    return out, end, n


def _check_reach(reach: float, k: int, n: int, fps: float, said: float | None) -> None:
    """Refuse storing over REPEAT frames a decoded one, or well past `said` (the header's)."""
    if said is not None and reach - said > max(said, 1.0):
        raise Reject(
            "timestamps", f"its frames run to {reach:.1f} s, its header says {said:.1f} s long"
        )
    need = max(k, math.ceil((reach - EPS) * fps))
    if need > REPEAT * n:
        frames = f"{n} decoded frame{'s' * (n != 1)}"
        raise Reject(
            "timestamps",
            f"its timestamps reach {reach:.1f} s after {frames}: {need:,} frames at --fps "
            f"{fps:g}, over {REPEAT} a decoded frame. HINT: a real video this sparse packs at "
            "a lower --fps",
        )
