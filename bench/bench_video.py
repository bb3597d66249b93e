"""Rows 27v: video (issue 27). 16-frame clips read by ClipDataset from raw and from JPEG
frames, against PyAV seeking and decoding each clip from the source file (what a video
Dataset does without offline packing), both in a DataLoader with 2 workers; the disk each
takes against the source files; and `prep video` against a bare loop that decodes and resizes
the same files on the same cores.

The sources are 640x360 clips at 30 fps of a disc crossing a panning, noisy texture, MPEG-4 at
1.5 Mbit/s with a keyframe every 2 s (a streaming site's interval: a seek decodes up to 60
frames before the first it needs)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rows import Row, info, timed, versus
from torch.utils.data import Dataset

FPS, SIZE, FRAMES, CROP, BATCH = 8, 128, 16, 112, 8
SRC_HW, SRC_FPS, GOP, BITRATE = (360, 640), 30, 60, 1_500_000


def scene(rng: np.random.Generator, direction: str, n: int) -> Any:
    """n frames (SRC_HW, RGB) of a textured background panning under a moving disc, with
    sensor-like noise: a bitrate and a decode cost like a real 360p clip's."""
    import cv2

    from prep.demo.video import DIRECTIONS

    h, w = SRC_HW
    dy, dx = DIRECTIONS[direction]
    small = rng.integers(0, 256, (h // 8 + 8, w // 8 + 8, 3), dtype=np.uint8)
    texture = cv2.resize(small, (w + 64, h + 64), interpolation=cv2.INTER_CUBIC)
    colour = tuple(int(c) for c in rng.integers(150, 256, 3))
    for k in range(n):
        pan = k % 64
        frame = np.ascontiguousarray(texture[pan // 2 : pan // 2 + h, pan : pan + w])
        centre = (int(w / 2 + dx * (k * 3 - w / 4)), int(h / 2 + dy * (k * 2 - h / 4)))
        cv2.circle(frame, centre, 30, colour, -1)
        noise = rng.integers(-3, 4, frame.shape, dtype=np.int16)
        yield np.clip(frame + noise, 0, 255).astype(np.uint8)


def sources(root: Path, count: int, seconds: float) -> list[Path]:
    """`count` clips of `seconds` (made once, kept under bench/out)."""
    import av

    from prep.demo.video import DIRECTIONS

    stamp = root / ".done"
    if not stamp.exists():
        rng = np.random.default_rng(0)
        for i in range(count):
            direction = list(DIRECTIONS)[i % 4]
            (root / direction).mkdir(parents=True, exist_ok=True)
            with av.open(str(root / direction / f"{i:03d}.mp4"), "w") as c:
                s = c.add_stream("mpeg4", rate=SRC_FPS)
                s.height, s.width = SRC_HW
                s.pix_fmt, s.bit_rate, s.codec_context.gop_size = "yuv420p", BITRATE, GOP
                for img in scene(rng, direction, int(seconds * SRC_FPS)):
                    for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                        c.mux(p)
                for p in s.encode():
                    c.mux(p)
        stamp.touch()
    return sorted(root.glob("*/*.mp4"))


class PyAVClips(Dataset[Any]):
    """The baseline: clip (path, start s) decoded from its file per read: seek to the keyframe
    before the start, decode on, pick the frames shown at start + k / FPS, resize the shorter
    side to SIZE, centre-crop CROP; uint8 (T, C, CROP, CROP)."""

    def __init__(self, items: list[tuple[str, float]]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        import av
        import torch

        from prep.media.video import fit_frame, rgb

        path, start = self.items[i]
        picked: list[Any] = []
        with av.open(path) as c:
            s = c.streams.video[0]
            c.seek(int(start / float(s.time_base or 1)), stream=s, backward=True)
            prev = None
            for f in c.decode(s):
                while prev is not None and len(picked) < FRAMES:
                    if f.time <= start + len(picked) / FPS + 1e-6:
                        break
                    picked.append(prev)
                if len(picked) == FRAMES:
                    break
                prev = f
            while prev is not None and len(picked) < FRAMES:
                picked.append(prev)
        out = np.stack([_crop(fit_frame(rgb(f), 0, SIZE, "short")) for f in picked])
        return torch.from_numpy(out).permute(0, 3, 1, 2)


def _crop(img: np.ndarray) -> np.ndarray:
    top, left = (img.shape[0] - CROP) // 2, (img.shape[1] - CROP) // 2
    return img[top : top + CROP, left : left + CROP]


def _rate(loader: Any) -> float:
    n = 0

    def epoch() -> None:
        nonlocal n
        n = sum(len(b[0]) if isinstance(b, (tuple, list)) else len(b) for b in loader)

    seconds = timed(epoch)
    return n / seconds


def _bare(paths: list[Path], jobs: int) -> float:
    """Seconds for the bare loop: decode every file and resize its frames at FPS, no writing."""
    from concurrent.futures import ProcessPoolExecutor

    from prep.media.video import decode_video

    def run() -> None:
        with ProcessPoolExecutor(jobs) as ex:
            list(
                ex.map(
                    decode_video,
                    paths,
                    [FPS] * len(paths),
                    [SIZE] * len(paths),
                    ["short"] * len(paths),
                )
            )

    return timed(run)


def _pack(src: Path, out: Path, codec: str, jobs: int) -> None:
    from prep.kinds.video.config import VideoConfig
    from prep.kinds.video.pack import pack_video

    cfg = VideoConfig(src=str(src), out=str(out), fps=FPS, size=SIZE, codec=codec, jobs=jobs)
    pack_video(cfg, show_progress=False)


def _pack_times(
    work: Path, paths: list[Path], jobs: int, reps: int
) -> tuple[dict[str, float], float]:
    """Best seconds of `prep video` (raw, jpeg) and of the bare loop, interleaved."""
    packs: dict[str, float] = {}
    bare = float("inf")
    for _ in range(reps):
        for codec in ("raw", "jpeg"):
            out = work / f"video-{codec}"
            shutil.rmtree(out, ignore_errors=True)  # not timed: the bare loop deletes nothing
            took = timed(lambda: _pack(work / "video-src", out, codec, jobs))  # noqa: B023
            packs[codec] = min(packs.get(codec, float("inf")), took)
        bare = min(bare, _bare(paths, jobs))
    return packs, bare


def _clip_rates(
    work: Path, paths: list[Path], seconds: float, per: int, reps: int, warm: bool = True
) -> dict[str, float]:
    """Best clips/s of ClipDataset (raw, jpeg) and of PyAV per clip, 2 workers each,
    interleaved; `per` clips a video at evenly spaced starts; `warm`: an untimed epoch first."""
    import torch

    from loaders import CenterCrop, ClipDataset, collate_batch

    loaders: dict[str, Any] = {}
    for codec in ("raw", "jpeg"):
        ds = ClipDataset(
            work / f"video-{codec}", FRAMES, crop=CenterCrop(CROP), clips_per_video=per
        )
        loaders[codec] = torch.utils.data.DataLoader(
            ds, batch_size=BATCH, num_workers=2, collate_fn=collate_batch, persistent_workers=True
        )
    span = (FRAMES - 1) / FPS
    items = [
        (str(p), j * (seconds - span - 1 / FPS) / (per - 1)) for p in paths for j in range(per)
    ]
    loaders["pyav"] = torch.utils.data.DataLoader(
        PyAVClips(items), batch_size=BATCH, num_workers=2, persistent_workers=True
    )
    best: dict[str, float] = {}
    for loader in loaders.values() if warm else ():
        _rate(loader)  # warm: workers started, pages cached
    for _ in range(reps):
        best = {k: max(best.get(k, 0.0), _rate(v)) for k, v in loaders.items()}
    return best


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    count, seconds = (2, 2.0) if args.smoke else (16, 8.0)  # smoke: the rows appear, no more
    paths = sources(work / "video-src", count, seconds)
    count = len(paths)  # a folder made by an earlier run may hold more
    src = sum(p.stat().st_size for p in paths) / 1e6
    packs, bare = _pack_times(work, paths, args.jobs, 1 if args.smoke else 3)
    per = 2 if args.smoke else 4  # clips a video, evenly spaced
    reps = 1 if args.smoke else max(3, args.reps)
    best = _clip_rates(work, paths, seconds, per, reps, warm=not args.smoke)
    disk = {c: sum(f.stat().st_size for f in (work / f"video-{c}").iterdir()) / 1e6 for c in packs}
    print(f"   (video: {count} clips of {seconds:g} s, {per} clips each read)", file=sys.stderr)
    vs_pyav = "video clips {} vs PyAV per clip, 2 workers"
    return [
        versus("27va " + vs_pyav.format("raw"), best["raw"], best["pyav"], "clip/s", ">= 20x"),
        versus("27vb " + vs_pyav.format("JPEG"), best["jpeg"], best["pyav"], "clip/s", ">= 5x"),
        info("27vc video disk raw vs source files", disk["raw"], src, "MB", "size"),
        info("27vd video disk JPEG vs source files", disk["jpeg"], src, "MB", "size"),
        *(
            versus(
                f"27v{e} prep video {c} vs bare decode+resize",
                count / packs[c],
                count / bare,
                "vid/s",
                ">= 0.9x",
            )
            for e, c in (("e", "raw"), ("f", "jpeg"))
        ),
    ]
