"""A sound file decoded once (libsndfile, else FFmpeg through PyAV), fitted to the stored
channels, resampled with soxr, converted to the stored dtype; bad input raises Reject
(docs/rejects.md). A header's length never sizes a buffer: over the cap (`Limit`) it is refused, and
decoding reads blocks, so a file costs what its real samples do."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import numpy as np

from prep.run.inputs import Reject
from prep.run.profile import stage

QUALITY = "HQ"  # soxr's high quality: 20-bit precision, flat to 0.9 of the lower Nyquist
# libsndfile's log of a WAV/AIFF whose data chunk says more bytes than the file holds
_SHORT_CHUNK = re.compile(r"^\s*(?:data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", re.M)
# A decode that ends this much before the header's length is a cut file, not rounding.
SHORT_FRACTION, SHORT_FRAMES = 0.02, 2304  # two MP3 frames
BLOCK = 1 << 20  # frames a libsndfile read holds at most: 4 MB a channel as float32
UNKNOWN = 2**63 - 1  # libsndfile's frame count of a stream that does not say (a piped FLAC)
MAX_FILE_SECONDS = 7200.0  # 2 hours: a long podcast or recorded session
# The cap counts samples (frames x channels) as seconds of this: memory follows samples.
CAP_RATE, CAP_CHANNELS = 48000, 2
# libsndfile's error codes that mean "not mine": FFmpeg says better what the file is not.
_NOT_RECOGNISED = (1, 4, 7)
# "Internal psf_fseek() failed": a read passed the real end of a FLAC that claims more.
_SEEK_FAILED = 39


def check(limit: float, frames: int, rate: int, channels: int, what: str) -> None:
    """Refuse over `limit` seconds, or more samples than `limit` seconds of 48 kHz stereo.

    >>> check(60, 192000 * 30, 192000, 2, "its header gives")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    prep.run.inputs.Reject: its header gives 30.0 s of 2 channels at 192000 Hz, more samples ...
    """
    long, cap = f"{frames / rate:.1f} s", f"--max-file-seconds {limit:g}"
    if frames / rate > limit:
        why = f"{long}, over {cap}"
    elif frames * channels > limit * CAP_RATE * CAP_CHANNELS:
        at = f"{channels} channels at {rate} Hz"
        why = f"{long} of {at}, more samples than {cap} of 48 kHz stereo"
    else:
        return
    hint = "HINT: raise --max-file-seconds if the file is trusted"
    raise Reject("too_long", f"{what} {why}. {hint}")


def _short(got: int, expected: int) -> bool:
    return expected - got > max(SHORT_FRAMES, SHORT_FRACTION * expected)


def _wav_rate(path: Path) -> int | None:
    """The sample rate a RIFF/WAVE header states (None: not a WAV)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    at = head.find(b"fmt ")
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE" or at < 0 or len(head) < at + 16:
        return None
    return int(struct.unpack_from("<I", head, at + 12)[0])


def _not_mpeg(path: Path) -> bool:
    # No ID3 tag nor MPEG frame sync: libsndfile's mpg123 would print resync notes, then fail.
    if path.suffix.lower() != ".mp3":
        return False
    with open(path, "rb") as f:
        head = f.read(3)
    return not (head == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] >= 0xE0))


def read_soundfile(path: Path, limit: float) -> tuple[np.ndarray, int] | None:
    """The file through libsndfile; None where it knows not its format or length (FFmpeg's)."""
    import soundfile as sf

    if _not_mpeg(path):
        return None
    try:
        f = sf.SoundFile(path)
    except sf.LibsndfileError as e:
        if e.code in _NOT_RECOGNISED:
            return None
        if _wav_rate(path) == 0:
            raise Reject("zero_rate", "the WAV header gives a sample rate of 0") from None
        raise Reject("corrupt", f"libsndfile cannot open it ({e.error_string})") from None
    with f:
        rate, frames, log = f.samplerate, f.frames, f.extra_info
        if frames == UNKNOWN:
            return None
        cut = _SHORT_CHUNK.search(log)
        if cut and int(cut.group(1)) > int(cut.group(2)):
            raise Reject(
                "truncated",
                f"its data chunk says {cut.group(1)} bytes, the file holds {cut.group(2)}",
            )
        if rate > 0:  # a rate of 0 is rejected by read_audio
            check(limit, frames, rate, f.channels, "its header gives")
        data = _blocks(f, rate, frames, limit)
    if _short(len(data), frames):
        raise Reject("truncated", f"{len(data)} of the {frames} frames its header gives")
    return data, rate


def _blocks(f: Any, rate: int, frames: int, limit: float) -> np.ndarray:
    """The rest of libsndfile file `f` as float32 (frames, channels), BLOCK frames a read."""
    import soundfile as sf

    blocks, got = [], 0
    while True:
        try:
            block = f.read(BLOCK, dtype="float32", always_2d=True)
        except sf.LibsndfileError as e:
            if e.code == _SEEK_FAILED:
                why = f"the file ends before the {frames} frames its header gives"
                raise Reject("truncated", why) from None
            raise Reject("corrupt", f"decoding fails ({e.error_string})") from None
        blocks.append(block)
        got += len(block)
        if rate > 0:  # an MP3's header length is an estimate: the cap counts what decodes
            check(limit, got, rate, f.channels, "decoding reaches")
        if len(block) < BLOCK:
            return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


def read_pyav(path: Path, limit: float) -> tuple[np.ndarray, int]:
    """The first audio stream through FFmpeg, float32 at its own rate and channels."""
    import av

    try:
        container = av.open(str(path), metadata_errors="replace")
    except (av.error.FFmpegError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or e  # not the errno and the path again
        raise Reject("corrupt", f"not a sound file libsndfile or FFmpeg reads ({why})") from None
    with container:
        if not container.streams.audio:
            kinds = sorted({str(s.type) for s in container.streams}) or ["no"]
            raise Reject("no_audio", f"no audio stream ({', '.join(kinds)} streams only)")
        stream = container.streams.audio[0]
        rate = int(stream.codec_context.sample_rate or stream.rate or 0)
        if rate <= 0:
            raise Reject("zero_rate", "the audio stream's sample rate is 0")
        expected = 0
        if stream.duration is not None and stream.time_base is not None:
            expected = int(stream.duration * stream.time_base * rate)
        check(limit, expected, rate, int(stream.codec_context.channels or 1), "its header gives")
        resampler = av.AudioResampler(format="fltp")
        planes, got = [], 0
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    planes.append(out.to_ndarray())  # (channels, n)
                    got += planes[-1].shape[1]
                    check(limit, got, rate, planes[-1].shape[0], "decoding reaches")
        except av.error.FFmpegError as e:
            why = e.strerror or e
            raise Reject("corrupt", f"decoding fails after {len(planes)} frames ({why})") from None
    data = np.concatenate(planes, axis=1).T if planes else np.zeros((0, 1), np.float32)
    if expected and _short(len(data), expected):
        raise Reject("truncated", f"{len(data)} of the {expected} samples its header gives")
    return np.ascontiguousarray(data, dtype=np.float32), rate


def read_audio(path: Path, limit: float) -> tuple[np.ndarray, int]:
    """(float32 (frames, channels), source rate) by libsndfile, else FFmpeg; finite, in `limit`."""
    if path.stat().st_size == 0:
        raise Reject("empty", "a zero-byte file")
    got = read_soundfile(path, limit)
    samples, rate = got if got is not None else read_pyav(path, limit)
    if rate <= 0:
        raise Reject("zero_rate", f"a sample rate of {rate}")
    if not len(samples):
        raise Reject("empty", "no audio samples")
    if not np.isfinite(samples).all():
        bad = int((~np.isfinite(samples)).sum())
        raise Reject("not_finite", f"{bad} NaN or infinite samples")
    return samples, rate


def fit_channels(samples: np.ndarray, channels: int, mono: bool) -> np.ndarray:
    """(frames, C) -> (frames,) averaged for `mono`, else (frames, channels), mono repeated.

    >>> fit_channels(np.array([[1.0, 3.0]], np.float32), 1, True).tolist()
    [2.0]
    """
    if mono:
        # Column by column: numpy's mean over a short last axis is ~40x slower (strided).
        mix = samples[:, 0].copy()
        for c in range(1, samples.shape[1]):
            mix += samples[:, c]
        return mix * np.float32(1 / samples.shape[1]) if samples.shape[1] > 1 else mix
    if samples.shape[1] == channels:
        return samples
    if samples.shape[1] == 1:
        return np.repeat(samples, channels, axis=1)
    raise Reject(
        "channels", f"{samples.shape[1]} channels, not {channels}: pass --mono or --channels"
    )


def to_stored(x: np.ndarray, dtype: str) -> np.ndarray:
    """Float samples (full scale 1.0) as stored: int16 rounds x * 32768 and clips; float16 clips.

    >>> to_stored(np.array([-1.0, 0.5, 1.0]), "int16").tolist()
    [-32768, 16384, 32767]
    """
    if dtype == "int16":
        return np.clip(np.rint(x * 32768.0), -32768, 32767).astype(np.int16)
    return np.clip(x, -65504.0, 65504.0).astype(np.float16)


def decode_clip(
    path: Path, rate: int, channels: int, mono: bool, dtype: str, limit: float = MAX_FILE_SECONDS
) -> tuple[np.ndarray, int]:
    """The file at `rate` Hz in `dtype`, (frames,) or (frames, channels), and its source rate."""
    import soxr

    with stage("read"):
        samples, source_rate = read_audio(path, limit)
    with stage("resample"):
        x = fit_channels(samples, channels, mono)
        if source_rate != rate:
            x = soxr.resample(np.ascontiguousarray(x), source_rate, rate, quality=QUALITY)
        return to_stored(x, dtype), source_rate
