"""prep video and ClipDataset: frames against PyAV's own at the same timestamps, a variable
frame rate, rotation, clips for any worker count, every reject, the same bytes for any --jobs."""

from __future__ import annotations

import json
import os
import shutil
import signal
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import cv2
import numpy as np
import pytest
import torch

av = pytest.importorskip("av", reason="prep video needs PyAV (pip install '.[media]')")

from loaders import ClipDataset, RandomResizedCrop, SampleDataset, collate_batch  # noqa: E402
from prep.demo.video import make_video_demo, shape_frames, write_clip  # noqa: E402
from prep.kinds.video.config import VideoConfig  # noqa: E402
from prep.kinds.video.pack import pack_video  # noqa: E402
from prep.media.video import fit_frame, frame_size, rgb  # noqa: E402
from prep.run.errors import PrepError  # noqa: E402
from tests.manifests import load  # noqa: E402

FPS, SIZE = 8.0, 32


def pack(src: Path, out: Path, **options: Any) -> Any:
    opts: dict[str, Any] = {"fps": FPS, "size": SIZE, "jobs": 1, "backend": "threads"} | options
    return pack_video(VideoConfig(src=str(src), out=str(out), **opts), show_progress=False)


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clip a direction: left_00 has a variable frame rate, right_00 a rotation."""
    root = tmp_path_factory.mktemp("video-raw")
    make_video_demo(root, per_class=1, seed=0)
    return root


@pytest.fixture(scope="module")
def packed(clips: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("video-packed") / "raw"
    pack(clips, out)
    return out


def reference(path: Path) -> tuple[list[np.ndarray], list[float], float, int]:
    """PyAV's own frames (RGB, as stored in the file), their start times, the end of the last
    one, and the rotation."""
    with av.open(str(path)) as c:
        decoded = [f for f in c.decode(video=0)]
        times = [float(f.time) for f in decoded]
        end = times[-1] + float(decoded[-1].duration * decoded[-1].time_base)
        rgb = [f.to_ndarray(format="rgb24") for f in decoded]
        return rgb, times, end, int(decoded[0].rotation)


def stored(ds: SampleDataset, name: str) -> dict[str, Any]:
    names = [ds.__getitems__([i])["source"][0] for i in range(len(ds))]
    return ds.__getitems__([names.index(name)])[0]


@pytest.mark.parametrize("name", ["down/down_00.mp4", "left/left_00.mp4"])
def test_frames_are_pyav_frames_at_the_same_timestamps(clips: Path, packed: Path, name: str):
    """left_00 has a variable frame rate: frame k is the one shown at k / fps, not frame
    k * source_fps / fps, and the two differ somewhere."""
    ds = SampleDataset(packed)
    sample = stored(ds, name)
    frames, times, end, _ = reference(clips / name)
    n = int(np.ceil(end * FPS - 1e-6))
    assert int(sample["num_frames"]) == len(sample["frames"]) == n
    assert float(sample["duration"]) == pytest.approx(end, abs=1e-3)
    with av.open(str(clips / name)) as c:
        assert float(sample["source_fps"]) == pytest.approx(float(c.streams.video[0].average_rate))
    shown = [max(j for j, t in enumerate(times) if t <= k / FPS + 1e-6) for k in range(n)]
    got = sample["frames"].permute(0, 2, 3, 1).numpy()
    h, w = got.shape[1:3]
    for k, j in enumerate(shown):
        want = cv2.resize(frames[j], (w, h), interpolation=cv2.INTER_AREA)
        assert np.abs(got[k].astype(int) - want).mean() < 2, (name, k)
    by_index = [min(len(times) - 1, round(k * len(times) / n)) for k in range(n)]
    assert (shown != by_index) == (name == "left/left_00.mp4")


def test_frames_convert_in_a_forked_process(clips: Path) -> None:
    """A forked process (a DataLoader worker) converts frames after this one did: PyAV 18.1.1's
    default converts on a pool of threads made once, which a fork lacks: it waited forever."""
    path = sorted(clips.rglob("*.mp4"))[0]

    def first() -> np.ndarray:
        with av.open(str(path)) as c:
            return rgb(next(c.decode(video=0)))

    want = first()
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a wait forever: killed, the test fails
        os._exit(0 if np.array_equal(first(), want) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("mode", ["short", "fill", "fit", "keep"])
def test_modes_give_pack_shapes(mode: str):
    """Each --mode stores the shape frame_size says, upright after a rotation; fit pads with 0
    and fill crops (no border)."""
    rng = np.random.default_rng(4)
    img = rng.integers(1, 256, (48, 80, 3), dtype=np.uint8)
    for rotation, hw in ((90, (80, 48)), (0, (48, 80))):
        out = fit_frame(img, rotation, 32, mode)
        assert out.shape == (*frame_size(*hw, 32, mode), 3) and out.dtype == np.uint8
    want = {"short": (32, 53), "fill": (32, 32), "fit": (32, 32), "keep": (19, 32)}[mode]
    assert out.shape[:2] == want
    assert (out[0].max() == 0) == (mode == "fit") and out[16].min() > 0


def test_a_resolution_change_keeps_the_first_shape():
    """A stream that changes resolution part way (spliced recordings) stores every frame at the
    first frame's shape: one (h, w) a video, as the Video field requires."""
    from prep.media.video import _pick

    def frame(h: int, w: int) -> Any:
        img = np.full((h, w, 3), 100, np.uint8)
        return SimpleNamespace(rotation=0, to_ndarray=lambda format, threads: img)

    frames = [(k / 8, 1 / 8, frame(48, 64) if k < 3 else frame(90, 160)) for k in range(6)]
    out, end, n = _pick(iter(frames), 8.0, 32, "short", None)
    assert n == 6 and end == pytest.approx(0.75) and len(out) == 6
    assert {f.shape for f in out} == {(32, 43, 3)}


def test_rotation_is_applied(clips: Path, packed: Path):
    """right_00 is stored turned clockwise with a display matrix of 90 degrees: packed, it
    stands upright (wider than high) and its shape moves right, as the class says."""
    ds = SampleDataset(packed)
    frames, _, _, rotation = reference(clips / "right/right_00.mp4")
    assert rotation == 90 and frames[0].shape[0] > frames[0].shape[1]
    got = stored(ds, "right/right_00.mp4")["frames"].float().mean(1)  # (T, H, W) grey
    assert got.shape[1] < got.shape[2]
    bright = got > got.mean() + 2 * got.std()
    xs = [float(torch.nonzero(b)[:, 1].float().mean()) for b in bright]
    assert xs[-1] > xs[0] + got.shape[2] / 4


def test_clips_same_for_0_and_2_workers(clips: Path, tmp_path: Path):
    pack(clips, tmp_path / "jpeg", codec="jpeg")
    ds = ClipDataset(tmp_path / "jpeg", frames=4, stride=2, crop=RandomResizedCrop(24), flip=True)
    ds.set_epoch(1)

    def read(workers: int) -> list[torch.Tensor]:
        dl = torch.utils.data.DataLoader(
            ds, batch_size=2, num_workers=workers, collate_fn=collate_batch
        )
        return [t for batch in dl for t in batch]

    zero, two = read(0), read(2)
    assert zero[0].shape == (2, 4, 3, 24, 24) and zero[0].dtype == torch.uint8
    assert all(torch.equal(a, b) for a, b in zip(zero, two, strict=True))
    one = ds.__getitems__([1]).tensors[0][0]
    assert torch.equal(one, zero[0][1])  # a clip does not depend on its batch
    ds.set_epoch(2)
    assert not torch.equal(ds.__getitems__([0, 1]).tensors[0], zero[0])


def _clips_at(ds: ClipDataset, epoch: int) -> list[torch.Tensor]:
    ds.set_epoch(epoch)
    return list(ds.__getitems__([0, 1]).tensors[0].float())


@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_one_crop_and_flip_a_clip(tmp_path: Path, codec: str):
    """Videos of one still textured frame: every frame of a clip is the same crop of it, flipped
    or not alike, while clips of other epochs get other crops."""
    rng, src = np.random.default_rng(5), tmp_path / "src"
    src.mkdir()
    for k in range(2):
        small = rng.integers(0, 256, (6, 9, 3), dtype=np.uint8)
        still = cv2.resize(small, (96, 64), interpolation=cv2.INTER_CUBIC)
        write_clip(src / f"{k}.mp4", [still] * 12)
    pack(src, tmp_path / "out", mode="fill", codec=codec)
    ds = ClipDataset(tmp_path / "out", frames=4, crop=RandomResizedCrop(24), flip=True)
    clips = [c for e in range(6) for c in _clips_at(ds, e)]
    for clip in clips:
        assert (clip - clip[0]).abs().mean() < 2  # one box and one flip for all 4 frames
    firsts = torch.stack([c[0] for c in clips[::2]])  # video 0 in each epoch
    assert (firsts[1:] - firsts[0]).abs().mean((1, 2, 3)).max() > 10


def test_evaluation_clips_and_max_frames(clips: Path, tmp_path: Path):
    out = tmp_path / "cut"
    pack(clips, out, max_frames=6, mode="fill")
    ds = SampleDataset(out)
    b = ds.__getitems__(list(range(len(ds))))
    assert max(len(v) for v in b["frames"]) == 6 and len(ds) > 4
    firsts = [i for i in range(len(ds)) if float(b["start"][i]) == 0]
    assert len(firsts) == 4 and float(b["start"][firsts[0] + 1]) == 6 / FPS
    pack(clips, tmp_path / "secs", clip_seconds=0.5, mode="fill")  # 4 frames at 8 fps
    secs = SampleDataset(tmp_path / "secs")
    assert max(len(v) for v in secs.__getitems__(list(range(len(secs))))["frames"]) == 4
    ev = ClipDataset(out, frames=4, clips_per_video=3)
    assert len(ev) == 3 * len(ds)
    x, _ = ev.__getitems__([0, 1, 2]).tensors
    full = b["frames"][0]  # video 0: 6 frames, clips start at 0, 1, 2
    assert torch.equal(x[1], full[1:5]) and torch.equal(x[2], full[2:6])


def _bad_inputs(root: Path, good: Path) -> dict[str, str]:
    """One file for each reject reason, beside `good` clips; their expected reasons."""
    (root / "empty.mp4").write_bytes(b"")
    (root / "junk.mp4").write_bytes(b"not a video " * 50)
    with av.open(str(root / "fast.mp4"), "w", options={"movflags": "faststart"}) as c:
        s = c.add_stream("mpeg4", rate=10)
        s.width, s.height, s.pix_fmt = 32, 32, "yuv420p"
        for img in shape_frames(np.random.default_rng(0), "left", 20):
            for p in s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(img[:32, :32]))):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    data = (root / "fast.mp4").read_bytes()
    (root / "truncated.mp4").write_bytes(data[: len(data) * 2 // 3])
    (root / "fast.mp4").unlink()
    with av.open(str(root / "audio.mkv"), "w") as c:
        _audio(c)
    with av.open(str(root / "silent.mkv"), "w") as c:  # a video stream with no frame
        v = c.add_stream("mpeg4", rate=10)
        v.width, v.height, v.pix_fmt = 32, 32, "yuv420p"
        _audio(c)
    _one_timestamp(root / "still.mkv")
    write_clip(root / "ok.mp4", shape_frames(np.random.default_rng(1), "up", 8))
    expected = {"empty.mp4": "empty", "junk.mp4": "corrupt", "truncated.mp4": "truncated"}
    return expected | {"audio.mkv": "no_video", "silent.mkv": "no_frames", "still.mkv": "zero_fps"}


def _audio(c: Any) -> None:
    s = c.add_stream("pcm_s16le", rate=8000)
    frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
    frame.sample_rate = 8000
    for p in [*s.encode(frame), *s.encode()]:
        c.mux(p)


def _one_timestamp(path: Path) -> None:
    """Frames that all start at 0: a frame rate of 0."""
    with av.open(str(path), "w") as c:
        s = c.add_stream("mpeg4", rate=10)
        s.width, s.height, s.pix_fmt = 32, 32, "yuv420p"
        packets = []
        for img in shape_frames(np.random.default_rng(2), "up", 4):
            packets += s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(img[:32, :32])))
        for p in [*packets, *s.encode()]:
            p.pts, p.dts, p.time_base = 0, 0, Fraction(1, 10)
            c.mux(p)


def test_every_reject(tmp_path: Path):
    src = tmp_path / "bad"
    src.mkdir()
    expected = _bad_inputs(src, tmp_path)
    with pytest.raises(PrepError, match="--max-rejects"):
        pack(src, tmp_path / "refused")
    summary = pack(src, tmp_path / "out", max_rejects=1.0)
    assert summary.packed == 1
    lines = (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()
    got = {r["path"]: r["reason"] for r in map(json.loads, lines)}
    assert got == expected


def test_same_bytes_for_any_jobs(clips: Path, tmp_path: Path):
    pack(clips, tmp_path / "one", codec="jpeg", shard_size=1)
    pack(clips, tmp_path / "two", codec="jpeg", shard_size=1, jobs=2, backend="loky")
    a, b = (load(tmp_path / n) for n in ("one", "two"))
    assert len(a["shards"]) == 4 and a["shards"] == b["shards"]


def test_cuda_decode_matches_cpu(packed: Path, clips: Path, tmp_path: Path):
    if not torch.cuda.is_available():
        pytest.skip("decode='cuda' needs a CUDA device")
    pytest.importorskip("torchvision", reason="decode='cuda' needs torchvision (the gpu extra)")
    pack(clips, tmp_path / "jpeg", codec="jpeg")
    crop = RandomResizedCrop(24)
    cpu, gpu = (
        ClipDataset(tmp_path / "jpeg", frames=4, crop=crop, decode=d).__getitems__([0, 1, 2, 3])
        for d in ("cpu", "cuda")
    )
    assert gpu.tensors[0].is_cuda and gpu.tensors[0].shape == cpu.tensors[0].shape
    diff = (gpu.tensors[0].cpu().float() - cpu.tensors[0].float()).abs().mean()
    assert diff < 3


def test_train_video_example_learns(packed: Path, capsys: pytest.CaptureFixture[str]):
    """examples/train_video.py as documented, for 10 steps on the module's 4 clips."""
    from examples import train_video

    argv = ["--data", str(packed), "--frames", "4", "--crop", "24", "--width", "8"]
    losses = train_video.main([*argv, "--limit", "10", "--workers", "0", "--batch-size", "3"])
    assert len(losses) == 10 and all(np.isfinite(losses))
    assert sum(losses[-4:]) < sum(losses[:4]), losses
    assert "val acc" in capsys.readouterr().out


def test_open_refuses_frame_ends_that_do_not_fit(packed: Path, tmp_path: Path):
    """A frame_ends array that no longer steps by whole raw frames is a FormatError at open
    (the Video field's checks)."""
    from loaders import FormatError, load_manifest

    out = tmp_path / "broken"
    shutil.copytree(packed, out)
    ends = next(out.glob("frames_ends_*-00000.npy"))
    arr = np.load(ends, mmap_mode="r+")
    arr[0] += 1
    arr.flush()
    del arr
    with pytest.raises(FormatError, match="frame"):
        load_manifest(out)
