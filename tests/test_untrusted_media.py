"""Sound and video files from strangers: what a tiny file may cost is bounded (a FLAC claiming
2**36 samples, a video whose timestamps jump ahead or run past its header, frames over
--max-pixels), each a reject that never ends the run; reject messages are one line; the audio
demo writes the same bytes for the same seed."""

from __future__ import annotations

import json
import math
import re
import shutil
import struct
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sf = pytest.importorskip("soundfile", reason="prep audio needs soundfile (pip install '.[media]')")
av = pytest.importorskip("av", reason="prep video needs PyAV (pip install '.[media]')")

from loaders import SampleDataset  # noqa: E402
from prep.demo.audio import OGG_SERIAL, make_audio_demo, set_ogg_serial  # noqa: E402
from prep.demo.video import shape_frames, write_clip  # noqa: E402
from prep.kinds.audio.config import AudioConfig  # noqa: E402
from prep.kinds.audio.pack import audio  # noqa: E402
from prep.kinds.video.config import VideoConfig  # noqa: E402
from prep.kinds.video.pack import pack_video  # noqa: E402

RATE = 8000  # the sources' rate and the stored one: nothing is resampled


def pack_audio(src: Path, out: Path, **options: Any) -> Any:
    opts: dict[str, Any] = {"rate": RATE, "mono": True, "jobs": 1, "backend": "threads"}
    return audio(AudioConfig(src=str(src), out=str(out), **(opts | options)), show_progress=False)


def pack_clips(src: Path, out: Path, **options: Any) -> Any:
    opts: dict[str, Any] = {"fps": 8.0, "size": 16, "jobs": 1, "backend": "threads"}
    cfg = VideoConfig(src=str(src), out=str(out), **(opts | options))
    return pack_video(cfg, show_progress=False)


def rejects(out: Path) -> dict[str, dict[str, str]]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["path"]: r for r in map(json.loads, lines)}


def reasons(out: Path) -> dict[str, str]:
    return {path: r["reason"] for path, r in rejects(out).items()}


def stored(out: Path, field: str) -> dict[str, np.ndarray]:
    """Each sample's `field`, by its source path."""
    ds = SampleDataset(out, fields=(field, "source"))
    got = [ds.__getitems__([i]) for i in range(len(ds))]
    return {b["source"][0]: np.asarray(b[field][0]) for b in got}


# Audio ----------------------------------------------------------------------------------------


def flac_claiming(path: Path, x: np.ndarray, total: int) -> None:
    """A real FLAC of `x`, its STREAMINFO's total-samples field then set to `total` (0: the
    stream does not say, which FLAC allows). STREAMINFO's data starts at byte 8; its bytes
    10..17 hold rate (20 bits), channels - 1 (3), bits - 1 (5) and total samples (36)."""
    sf.write(path, x, RATE, format="FLAC", subtype="PCM_16")
    data = bytearray(path.read_bytes())
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # the first block is STREAMINFO
    (packed,) = struct.unpack_from(">Q", data, 18)
    assert packed & (2**36 - 1) == len(x)
    struct.pack_into(">Q", data, 18, packed & ~(2**36 - 1) | total)
    path.write_bytes(bytes(data))


def test_a_flac_claiming_2_36_samples_is_a_reject(tmp_path: Path) -> None:
    """The header's length never sizes a buffer: a claim over --max-file-seconds is refused
    before decoding, a claim under it that the file does not hold is `truncated`, and a FLAC
    that gives no length (a piped encode) packs its samples, bit-exact."""
    src = tmp_path / "src"
    src.mkdir()
    x = (0.3 * np.sin(np.arange(800) / 5)).astype(np.float32)
    sf.write(src / "ok.flac", x, RATE, format="FLAC", subtype="PCM_16")
    flac_claiming(src / "bomb.flac", x, 2**36 - 1)  # 99 days at 8 kHz: 256 GiB as float32
    flac_claiming(src / "liar.flac", x, RATE * 3600)  # an hour, under the 2-hour cap
    flac_claiming(src / "stream.flac", x, 0)
    summary = pack_audio(src, tmp_path / "out", max_rejects=1.0)
    assert (summary.packed, summary.rejected) == (2, 2)
    assert reasons(tmp_path / "out") == {"bomb.flac": "too_long", "liar.flac": "truncated"}
    got = rejects(tmp_path / "out")
    assert got["bomb.flac"]["message"].startswith(f"its header gives {(2**36 - 1) / RATE:.1f} s")
    assert "ends before the 28800000 frames its header gives" in got["liar.flac"]["message"]
    want = sf.read(src / "ok.flac", dtype="int16")[0]
    clips = stored(tmp_path / "out", "audio")
    assert np.array_equal(clips["ok.flac"], want) and np.array_equal(clips["stream.flac"], want)


def test_max_file_seconds_counts_what_decodes_and_the_samples(tmp_path: Path) -> None:
    """A file that gives no length is stopped as it decodes; a short file with many channels at
    a high rate holds more samples than the cap's seconds of 48 kHz stereo."""
    src = tmp_path / "src"
    src.mkdir()
    x = (0.3 * np.sin(np.arange(800) / 5)).astype(np.float32)  # 0.1 s
    flac_claiming(src / "stream.flac", x, 0)
    wide = np.repeat(np.sin(np.arange(2400) / 9)[:, None] * 0.2, 8, axis=1)  # 0.05 s, 8 channels
    sf.write(src / "wide.wav", wide.astype(np.float32), 48000, subtype="PCM_16")
    sf.write(src / "ok.wav", x[:400], RATE, subtype="PCM_16")  # 0.05 s, 1 channel
    summary = pack_audio(src, tmp_path / "out", max_rejects=1.0, max_file_seconds=0.08)
    assert summary.packed == 1
    assert reasons(tmp_path / "out") == {"stream.flac": "too_long", "wide.wav": "too_long"}
    got = rejects(tmp_path / "out")
    assert got["stream.flac"]["message"].startswith("decoding reaches 0.1 s, over")
    assert "8 channels at 48000 Hz, more samples than" in got["wide.wav"]["message"]
    summary = pack_audio(src, tmp_path / "all", max_file_seconds=0.2)
    assert (summary.packed, summary.rejected) == (3, 0)


def test_audio_demo_same_seed_same_bytes(tmp_path: Path) -> None:
    """libsndfile numbers each Ogg stream at random; the demo's .ogg files get a fixed one."""
    for run in ("one", "two"):
        make_audio_demo(tmp_path / run, per_class=2, seed=3)
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*.*"))
    assert [p for p in files if p.suffix == ".ogg"]
    for rel in files:
        assert (tmp_path / "one" / rel).read_bytes() == (tmp_path / "two" / rel).read_bytes(), rel


def test_ogg_serial_rewrite_keeps_the_page_checksums(tmp_path: Path) -> None:
    """Rewriting a page's serial with its own value gives libogg's bytes back (the checksums
    agree with libogg's); a new serial decodes to the same samples (libogg drops a page whose
    checksum is wrong)."""
    x = (0.3 * np.sin(np.arange(20000) / 7)).astype(np.float32)
    sf.write(tmp_path / "a.ogg", x, 22050, format="OGG", subtype="VORBIS")
    original = (tmp_path / "a.ogg").read_bytes()
    serial = int.from_bytes(original[14:18], "little")
    shutil.copy(tmp_path / "a.ogg", tmp_path / "b.ogg")
    set_ogg_serial(tmp_path / "b.ogg", serial)
    assert (tmp_path / "b.ogg").read_bytes() == original
    set_ogg_serial(tmp_path / "b.ogg")
    changed = (tmp_path / "b.ogg").read_bytes()
    assert changed.count(OGG_SERIAL.to_bytes(4, "little")) == original.count(b"OggS") >= 3
    assert np.array_equal(sf.read(tmp_path / "b.ogg")[0], sf.read(tmp_path / "a.ogg")[0])


# Video ----------------------------------------------------------------------------------------


def small_frames(n: int, side: int = 16) -> list[np.ndarray]:
    return [f[:side, :side].copy() for f in shape_frames(np.random.default_rng(5), "left", n)]


def claim_duration(path: Path, seconds: float) -> None:
    """Set a Matroska file's Segment Duration (element 0x4489, an 8-byte float in ms)."""
    data = bytearray(path.read_bytes())
    at = data.find(b"\x44\x89\x88")
    assert at > 0 and data.find(b"\x44\x89\x88", at + 1) < 0
    struct.pack_into(">d", data, at + 3, seconds * 1000)
    path.write_bytes(bytes(data))


def end_of(path: Path) -> float:
    """Where PyAV says the last frame ends, from the first one's start."""
    with av.open(str(path)) as c:
        frames = list(c.decode(video=0))
    last = frames[-1]
    return float(last.time - frames[0].time + last.duration * last.time_base)


def test_a_jump_in_timestamps_is_a_reject_not_repeats(tmp_path: Path) -> None:
    """A two-frame file whose second frame is stamped 60 s on would store 481 frames at --fps 8
    (the report's 20,000 s gave 160,008): over 64 a decoded frame, a reject. So is a file
    whose frames run to 10 s when its header says 0.5 s. A slideshow of 4 s a picture packs."""
    src = tmp_path / "src"
    src.mkdir()
    frames = small_frames(11)
    write_clip(src / "jump.mp4", frames[:2], [0, 60_000])
    write_clip(src / "slides.mp4", frames[:3], [0, 4000, 8000])
    write_clip(src / "long.mkv", frames, [1000 * k for k in range(11)])
    claim_duration(src / "long.mkv", 0.5)
    with av.open(str(src / "long.mkv")) as c:
        assert c.duration == 500_000  # FFmpeg reads the claim: 0.5 s in microseconds
    assert (src / "jump.mp4").stat().st_size < 4000
    summary = pack_clips(src, tmp_path / "out", max_rejects=1.0)
    assert (summary.packed, summary.rejected) == (1, 2)
    assert reasons(tmp_path / "out") == {"jump.mp4": "timestamps", "long.mkv": "timestamps"}
    got = rejects(tmp_path / "out")
    assert "reach 60.0 s after 1 decoded frame: 480 frames" in got["jump.mp4"]["message"]
    assert "its header says 0.5 s" in got["long.mkv"]["message"]
    num = stored(tmp_path / "out", "num_frames")["slides.mp4"]
    assert int(num) == math.ceil(end_of(src / "slides.mp4") * 8 - 1e-6) > 64


def mjpeg_growing(path: Path) -> None:
    """An MJPEG stream whose header (and first frames) are 16x16 and whose frames 2 and 3 are
    64x64 JPEGs: what a header says is not what every frame is."""

    def jpegs(side: int) -> list[bytes]:
        cc = av.CodecContext.create("mjpeg", "w")
        cc.width = cc.height = side
        cc.pix_fmt, cc.time_base = "yuvj420p", Fraction(1, 10)
        out = []
        for img in small_frames(2, side):
            frame = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format="yuvj420p")
            out += [bytes(p) for p in cc.encode(frame)]
        return out + [bytes(p) for p in cc.encode()]

    with av.open(str(path), "w") as c:
        s = c.add_stream("mjpeg", rate=10)
        s.width = s.height = 16
        s.pix_fmt = "yuvj420p"
        for k, data in enumerate(jpegs(16) + jpegs(64)):
            packet = av.Packet(data)
            packet.stream, packet.pts, packet.dts = s, k, k
            packet.time_base = Fraction(1, 10)
            c.mux(packet)


def test_max_pixels_refuses_video_frames(tmp_path: Path) -> None:
    """--max-pixels as prep pack's: by the stream's header before decoding, and each decoded
    frame (a stream that grows part way)."""
    src = tmp_path / "src"
    src.mkdir()
    write_clip(src / "wide.mp4", shape_frames(np.random.default_rng(0), "up", 4))  # 96x64
    mjpeg_growing(src / "grow.mkv")
    write_clip(src / "ok.mp4", small_frames(4, 32))
    summary = pack_clips(src, tmp_path / "out", max_rejects=1.0, max_pixels=32 * 32)
    assert summary.packed == 1
    assert reasons(tmp_path / "out") == {"grow.mkv": "too_large", "wide.mp4": "too_large"}
    got = rejects(tmp_path / "out")
    assert got["wide.mp4"]["message"].startswith("its header gives frames of 96x64 = 6,144")
    assert got["grow.mkv"]["message"].startswith("frame 2 is 64x64 = 4,096 pixels")
    assert pack_clips(src, tmp_path / "all").packed == 3  # the default cap: 100 M pixels


def test_media_reject_messages_are_one_line(tmp_path: Path) -> None:
    """FFmpeg's errors carry an errno and the path; a reject's message has neither."""
    for kind in ("sound", "video"):
        (tmp_path / kind).mkdir()
    junk = bytes(range(256)) * 12
    for name in ("junk.m4a", "junk.wav", "junk.mp3"):
        (tmp_path / "sound" / name).write_bytes(junk)
    sf.write(tmp_path / "sound" / "ok.wav", np.zeros(800, np.float32), RATE)
    (tmp_path / "video" / "junk.mp4").write_bytes(junk)
    write_clip(tmp_path / "video" / "ok.mp4", small_frames(4))
    pack_audio(tmp_path / "sound", tmp_path / "a", max_rejects=1.0)
    pack_clips(tmp_path / "video", tmp_path / "v", max_rejects=1.0)
    got = list(rejects(tmp_path / "a").values()) + list(rejects(tmp_path / "v").values())
    assert len(got) == 4
    for r in got:
        assert r["reason"] == "corrupt" and "\n" not in r["message"], r
        assert "Errno" not in r["message"] and str(tmp_path) not in r["message"], r


def test_every_media_reject_code_is_in_the_readme() -> None:
    root = Path(__file__).resolve().parents[1]
    table = set(re.findall(r"^\| `(\w+)` \|", (root / "docs" / "rejects.md").read_text(), re.M))
    found = [*(root / "prep/kinds").glob("[av]*o/*.py"), *(root / "prep/media").glob("[av]*o.py")]
    text = "".join(p.read_text() for p in sorted(found))
    emitted = set(re.findall(r"Reject\(\s*\"(\w+)\"", text))
    assert {"too_long", "too_large", "timestamps", "truncated", "no_audio", "no_video"} <= emitted
    assert emitted <= table, f"not in docs/rejects.md's reject codes: {sorted(emitted - table)}"
