"""prep audio and AudioDataset: clips against an independent soundfile + soxr read, every
reject, --max-seconds cuts, labels and targets, windows the same for 0 and 2 workers, the same
bytes for any --jobs."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

sf = pytest.importorskip("soundfile", reason="prep audio needs soundfile (pip install '.[media]')")
soxr = pytest.importorskip("soxr", reason="prep audio needs soxr (pip install '.[media]')")

from typer.testing import CliRunner  # noqa: E402

from loaders import AudioDataset, SampleDataset, make_loader  # noqa: E402
from prep.cli.main import app  # noqa: E402
from prep.kinds.audio.config import AudioConfig  # noqa: E402
from prep.kinds.audio.pack import audio  # noqa: E402
from prep.run.errors import PrepError  # noqa: E402

RATE = 16000


def pack(src: Path, out: Path, **options: Any) -> Any:
    opts: dict[str, Any] = {"rate": RATE, "mono": True, "jobs": 1, "backend": "threads"}
    return audio(AudioConfig(src=str(src), out=str(out), **(opts | options)), show_progress=False)


def tone(rate: int, seconds: float, channels: int = 1, hz: float = 440.0) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    x = 0.4 * np.sin(2 * np.pi * hz * t)
    cols = [
        x * (1 - 0.3 * c) + 0.05 * np.sin(2 * np.pi * 97 * (c + 1) * t) for c in range(channels)
    ]
    return np.stack(cols, axis=1).astype(np.float32)


@pytest.fixture(scope="module")
def sounds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two classes, four formats, three source rates, mono and stereo, 0.3-0.7 s each."""
    root = tmp_path_factory.mktemp("audio-raw")
    (root / "a").mkdir()
    (root / "b").mkdir()
    sf.write(root / "a" / "one.wav", tone(44100, 0.5, 2), 44100, subtype="PCM_16")
    sf.write(root / "a" / "two.flac", tone(22050, 0.3, 1, 300), 22050)
    sf.write(root / "b" / "three.ogg", tone(48000, 0.7, 2, 600), 48000, format="OGG")
    sf.write(root / "b" / "four.mp3", tone(22050, 0.6, 1, 800), 22050, format="MP3")
    sf.write(root / "b" / "five.wav", tone(RATE, 0.4, 1, 500), RATE, subtype="FLOAT")
    return root


@pytest.fixture(scope="module")
def packed(sounds: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audio-packed") / "mono"
    pack(sounds, out)
    return out


def reference(path: Path, mono: bool = True, dtype: str = "int16") -> np.ndarray:
    """The file read by soundfile, down-mixed, resampled by soxr (HQ), as stored."""
    x, rate = sf.read(path, dtype="float32", always_2d=True)
    x = x.mean(axis=1) if mono else x
    y = soxr.resample(x, rate, RATE, quality="HQ") if rate != RATE else x
    if dtype == "float16":
        return y.astype(np.float16)
    return np.clip(np.rint(y * 32768), -32768, 32767).astype(np.int16)


def whole_clips(root: Path) -> dict[str, np.ndarray]:
    ds = AudioDataset(root, seconds=None, fields=["index"])
    named = SampleDataset(root, fields=["source"])
    out = {}
    for i in range(len(ds)):
        b = ds.__getitems__([i])
        n = int(b["audio_len"][0])
        out[named.__getitems__([i])["source"][0]] = b["audio"][0, ..., :n].numpy()
    return out


def test_clips_match_soundfile_and_soxr(sounds: Path, packed: Path) -> None:
    clips = whole_clips(packed)
    assert sorted(clips) == ["a/one.wav", "a/two.flac", "b/five.wav", "b/four.mp3", "b/three.ogg"]
    for rel, got in clips.items():
        want = reference(sounds / rel)
        assert got.dtype == np.int16 and got.shape == want.shape, rel
        assert np.abs(got.astype(np.int32) - want).max() <= 1, rel
    m = json.loads((packed / "manifest.json").read_text())
    assert m["fields"]["audio"]["rate"] == RATE and m["fields"]["audio"]["channels"] == 1
    rates = AudioDataset(packed, fields=["source_rate"]).__getitems__(range(5))["source_rate"]
    assert sorted(rates.tolist()) == [16000, 22050, 22050, 44100, 48000]


def test_stereo_float16_and_max_seconds(sounds: Path, tmp_path: Path) -> None:
    out = tmp_path / "stereo"
    pack(sounds / "a", out, mono=False, channels=2, dtype="float16", max_seconds=0.2)
    ds = AudioDataset(out, seconds=None, fields=["start"])
    want = reference(sounds / "a" / "one.wav", mono=False, dtype="float16")  # (frames, 2)
    b = ds.__getitems__(range(len(ds)))
    starts = b["start"].tolist()
    k = 1  # one.wav sorts first: its clips are 0..k-1, their starts rising from 0
    while starts[k] > 0:
        k += 1
    cut = list(range(k))
    assert starts[:k] == [0, 3200, 6400]  # 0.5 s = 8000 samples: 3200, 3200, 1600
    pieces = [b["audio"][j, :, : int(b["audio_len"][j])].numpy().T for j in cut]
    assert b["audio"].shape[1] == 2 and b["audio"].dtype == torch.float16
    np.testing.assert_array_equal(np.concatenate(pieces), want)
    assert max(int(n) for n in b["audio_len"]) == 3200  # 0.2 s at 16 kHz
    w = AudioDataset(out, seconds=0.1, random=False).__getitems__([0])["audio"]  # centred
    assert w.shape == (1, 2, 1600) and w.is_contiguous() and b["audio"].is_contiguous()
    assert torch.equal(w[0], b["audio"][0, :, 800:2400])


def test_opus_and_ffmpeg_from_a_list(tmp_path: Path) -> None:
    """Opus through libsndfile; 16-bit PCM in Matroska, which libsndfile does not know, through
    PyAV (against its own samples resampled by soxr); labels from a CSV list as SRC."""
    av = pytest.importorskip("av")
    from prep.media.audio import read_soundfile

    sf.write(tmp_path / "v.opus", tone(48000, 0.3), 48000, format="OGG", subtype="OPUS")
    pcm = np.rint(tone(22050, 0.3, 2, 350) * 32767).astype(np.int16)
    with av.open(str(tmp_path / "s.mka"), "w", format="matroska") as c:
        s = c.add_stream("pcm_s16le", rate=22050, layout="stereo")
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="stereo")
        frame.sample_rate = 22050
        c.mux([*s.encode(frame), *s.encode()])
    assert read_soundfile(tmp_path / "s.mka", 60) is None  # not libsndfile's: FFmpeg decodes it
    (tmp_path / "list.csv").write_text("path,label\nv.opus,voice\ns.mka,song\n")
    pack(tmp_path / "list.csv", tmp_path / "out")
    clips = whole_clips(tmp_path / "out")
    want = soxr.resample(pcm.astype(np.float32).mean(axis=1) / 32768, 22050, RATE, quality="HQ")
    assert np.abs(clips["s.mka"] - np.rint(want * 32768)).max() <= 1
    assert np.abs(clips["v.opus"].astype(np.int32) - reference(tmp_path / "v.opus")).max() <= 1
    got = AudioDataset(tmp_path / "out").__getitems__([0, 1])["label"].tolist()
    assert got == [1, 0]  # classes sorted: song, voice


def bad_files(root: Path) -> dict[str, str]:
    """One file per reject code: its name -> the code."""
    root.mkdir()
    sf.write(root / "ok.wav", tone(RATE, 0.2), RATE)
    (root / "empty.wav").write_bytes(b"")
    (root / "junk.flac").write_bytes(b"fLaC" + bytes(range(256)) * 8)
    (root / "text.mp3").write_text("not a sound\n")
    whole = (root / "ok.wav").read_bytes()
    (root / "cut.wav").write_bytes(whole[: len(whole) // 2])
    sf.write(root / "long.mp3", tone(22050, 1.0), 22050, format="MP3")
    mp3 = (root / "long.mp3").read_bytes()
    (root / "cut.mp3").write_bytes(mp3[: len(mp3) // 3])
    (root / "long.mp3").unlink()
    nan = tone(RATE, 0.2)
    nan[50] = np.nan
    sf.write(root / "nan.wav", nan, RATE, subtype="FLOAT")
    zero = bytearray(whole)
    struct.pack_into("<II", zero, 24, 0, 0)  # the fmt chunk's sample rate and byte rate
    (root / "rate0.wav").write_bytes(bytes(zero))
    sf.write(root / "three.wav", tone(RATE, 0.2, 3), RATE)
    _video_only(root / "silent.mka")
    return {
        "empty.wav": "empty",
        "junk.flac": "corrupt",
        "text.mp3": "corrupt",
        "cut.wav": "truncated",
        "cut.mp3": "truncated",
        "nan.wav": "not_finite",
        "rate0.wav": "zero_rate",
        "three.wav": "channels",
        "silent.mka": "no_audio",
    }


def _video_only(path: Path) -> None:
    av = pytest.importorskip("av")
    with av.open(str(path), "w", format="matroska") as c:
        s = c.add_stream("mpeg4", rate=8)
        s.width = s.height = 16
        for i in range(4):
            frame = av.VideoFrame.from_ndarray(np.full((16, 16, 3), i * 40, np.uint8), "rgb24")
            c.mux(s.encode(frame))
        c.mux(s.encode())


def test_every_reject(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    codes = bad_files(tmp_path / "bad")
    with pytest.raises(PrepError, match="--max-rejects"):
        pack(tmp_path / "bad", tmp_path / "out", mono=False, channels=2)
    s = pack(
        tmp_path / "bad", tmp_path / "out", mono=False, channels=2, max_rejects=1.0, resume=True
    )
    assert (s.packed, s.rejected) == (1, len(codes))
    lines = (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()
    records = {r["path"]: r for r in map(json.loads, lines)}
    assert {path: r["reason"] for path, r in records.items()} == codes
    assert records["text.mp3"]["message"].startswith("not a sound file libsndfile or FFmpeg")
    assert "Illegal Audio-MPEG-Header" not in capfd.readouterr().err  # mpg123 never saw it


def test_labels_and_targets_from_csv(sounds: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\na/one.wav,speech\na/two,music\nb/five.wav,speech\n")
    targets = tmp_path / "targets.csv"
    targets.write_text("path,snr\na/one,1.5\na/two.flac,2.25\nb/five,-3\n")
    out = tmp_path / "out"
    s = pack(sounds, out, labels=str(labels), targets=str(targets), max_rejects=1.0)
    assert (s.packed, s.rejected) == (3, 2)  # three.ogg and four.mp3: no row in --labels
    b = AudioDataset(out, fields=["label", "snr"]).__getitems__([0, 1, 2])
    assert b["label"].tolist() == [1, 0, 1]  # classes sorted: music, speech
    assert b["snr"].tolist() == [1.5, 2.25, -3.0]
    s = pack(sounds, tmp_path / "one", targets=str(targets), limit=1, max_rejects=1.0)
    assert (s.packed, s.rejected) == (1, 0)  # rows of files past --limit are not strays
    targets.write_text("path,snr\na/one,1.5\na/none,2\n")
    with pytest.raises(PrepError, match="line 3 names 'a/none', no sound file in SRC"):
        pack(sounds, tmp_path / "two", targets=str(targets), max_rejects=1.0)


def test_windows_same_for_0_and_2_workers(packed: Path) -> None:
    ds = AudioDataset(packed, seconds=0.5, seed=3, fields=["label", "index"])
    whole = AudioDataset(packed, seconds=None)

    def epoch(workers: int) -> list[dict[str, torch.Tensor]]:
        loader = make_loader(ds, batch_size=2, shuffle=True, num_workers=workers, seed=1)
        return [dict(b) for b in loader]

    zero, two = epoch(0), epoch(2)
    assert len(zero) == len(two) == 3
    for a, b in zip(zero, two, strict=True):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
    for b in zero:  # each window is the clip's own samples from its start, zeros past its end
        for j, i in enumerate(b["index"].tolist()):
            clip = whole.__getitems__([i])
            n, full = int(b["audio_len"][j]), int(clip["audio_len"][0])
            start = int(ds.starts(np.array([i]), np.array([full]))[0])
            assert n == min(8000, full - start)
            assert torch.equal(b["audio"][j, :n], clip["audio"][0, start : start + n])
            assert not b["audio"][j, n:].any()
    ds.set_epoch(1)
    lengths = ds.lengths(range(len(ds)))
    moved = ds.starts(np.arange(len(ds)), lengths)
    ds.set_epoch(0)
    assert (moved != ds.starts(np.arange(len(ds)), lengths)).any()


def test_same_bytes_for_any_jobs(sounds: Path, tmp_path: Path) -> None:
    def files(out: Path) -> dict[str, bytes]:
        found = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
        m = json.loads(found.pop("manifest.json"))
        m["config"].pop("out")
        return found | {"manifest.json": json.dumps(m, sort_keys=True).encode()}

    for jobs in (1, 2):
        pack(sounds, tmp_path / f"j{jobs}", jobs=jobs, shard_size=2)
    assert files(tmp_path / "j1") == files(tmp_path / "j2")


def test_cli_demo_pack_verify_info(tmp_path: Path) -> None:
    run = CliRunner().invoke
    demo = tmp_path / "demo"
    assert run(app, ["demo", "--audio", str(demo)]).exit_code == 0
    out = str(tmp_path / "packed")
    got = run(app, ["audio", str(demo), out, "--mono", "--max-seconds", "1", "-q"])
    assert got.exit_code == 0, got.output
    for look in ("verify", "info"):
        got = run(app, [look, out])
        assert got.exit_code == 0, got.output
    assert "0 rejected" in got.output and "at 16000 Hz, 1 channel, int16" in got.output
    got = run(app, ["audio", str(demo / "nowhere"), str(tmp_path / "x")])
    assert got.exit_code == 1 and "does not exist" in got.output


def test_train_audio_learns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from examples import train_audio
    from prep.demo.audio import make_audio_demo

    make_audio_demo(tmp_path / "demo", per_class=4, seed=0)
    pack(tmp_path / "demo", tmp_path / "packed")
    argv = ["--data", str(tmp_path / "packed"), "--limit", "20", "--workers", "0"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # convolutions this small: a second thread only adds waiting
    try:
        losses = train_audio.main([*argv, "--batch-size", "8", "--seconds", "0.1", "--width", "8"])
    finally:
        torch.set_num_threads(threads)
    assert len(losses) == 20 and all(np.isfinite(losses))
    assert sum(losses[-5:]) < sum(losses[:5]), losses
    assert "val acc" in capsys.readouterr().out
