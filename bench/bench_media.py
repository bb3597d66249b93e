"""Rows 27a: audio (issue 27). One shuffled epoch of 1-second windows read by AudioDataset
against a DataLoader with 2 workers that decodes and resamples each source file per sample
(soundfile + soxr, the way Hugging Face datasets' `Audio` reads); the disk int16 at 16 kHz takes
against the source MP3s; and `prep audio` against a bare loop that decodes and resamples the
same files on the same cores.

The sources are MP3s at 44.1 kHz stereo (tones over noise), SECONDS long each, made once and
kept under bench/out. Each kind's rows are one function (`audio_rows`); `rows` gathers them.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from rows import Row, info, versus
from torch.utils.data import Dataset

RATE, SRC_RATE, SECONDS, WINDOW, BATCH = 16000, 44100, 10.0, 1.0, 32


def audio_sources(root: Path, count: int, seconds: float) -> list[Path]:
    """`count` MP3s of `seconds` in two class folders (made once, kept under bench/out)."""
    import soundfile as sf

    done = root / ".done"
    paths = [root / ("ab"[i % 2]) / f"clip_{i:04d}.mp3" for i in range(count)]
    if done.is_file():
        return paths

    def write(i: int) -> None:
        rng = np.random.default_rng([27, i])
        t = np.arange(round(seconds * SRC_RATE)) / SRC_RATE
        x = 0.3 * np.sin(2 * np.pi * (220 + 40 * i % 600) * t) + 0.05 * rng.standard_normal(len(t))
        stereo = np.stack([x, np.roll(x, 11)], axis=1).astype(np.float32)
        paths[i].parent.mkdir(parents=True, exist_ok=True)
        sf.write(paths[i], stereo, SRC_RATE, format="MP3")

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(write, range(count)))
    done.touch()
    return paths


def decode_resample(path: Path) -> np.ndarray:
    """What the baseline and the bare loop do per file: decode, down-mix, resample, int16."""
    import soundfile as sf
    import soxr

    x, rate = sf.read(path, dtype="float32", always_2d=True)
    y = soxr.resample(x.mean(axis=1), rate, RATE, quality="HQ")
    return np.clip(np.rint(y * 32768), -32768, 32767).astype(np.int16)


class DecodePerSample(Dataset[Any]):
    """Per sample: the whole source decoded and resampled, then a random 1 s window."""

    def __init__(self, paths: list[Path]):
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Any:
        import torch

        y = decode_resample(self.paths[i])
        w = round(WINDOW * RATE)
        start = int(np.random.default_rng(i).integers(0, max(len(y) - w, 0) + 1))
        out = np.zeros(w, np.int16)
        piece = y[start : start + w]
        out[: len(piece)] = piece
        return torch.from_numpy(out), i % 2


def epoch_rate(loader: Any, n: int, min_s: float = 0.0) -> float:
    """Samples/s of whole epochs over `loader` (`n` samples each), repeated for `min_s`."""
    start, done = time.perf_counter(), 0
    while True:
        for _ in loader:
            pass
        done += n
        took = time.perf_counter() - start
        if took >= min_s:
            return done / took


def best(fns: dict[str, Callable[[], float]], reps: int) -> dict[str, float]:
    """Each measure's best of `reps`, interleaved (others share the cores)."""
    got: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            got[k].append(fn())
    return {k: max(v) for k, v in got.items()}


def packing_rates(
    raw: Path, out: Path, paths: list[Path], jobs: int, reps: int
) -> dict[str, float]:
    """Files/s of `prep audio` (the whole run, in this process) and of the bare loop."""
    from prep.kinds.audio.config import AudioConfig
    from prep.kinds.audio.pack import audio
    from prep.media.audio import decode_clip

    def pack() -> float:
        cfg = AudioConfig(src=str(raw), out=str(out), rate=RATE, mono=True, jobs=jobs)
        cfg.overwrite = True
        start = time.perf_counter()
        audio(cfg, show_progress=False)
        return len(paths) / (time.perf_counter() - start)

    def bare() -> float:  # prep's own decode, down-mix and resample; nothing written
        start = time.perf_counter()
        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(lambda p: decode_clip(p, RATE, 1, True, "int16"), paths))
        return len(paths) / (time.perf_counter() - start)

    return best({"pack": pack, "bare": bare}, reps)


def audio_rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from torch.utils.data import DataLoader

    from loaders import AudioDataset, make_loader

    count, seconds = (8, 2.0) if args.smoke else (120, SECONDS)
    raw, out = work / "media" / f"audio{count}", work / "media" / f"audio{count}-packed"
    paths = audio_sources(raw, count, seconds)
    jobs = args.jobs
    packing = packing_rates(raw, out, paths, jobs, args.reps)
    ds = AudioDataset(out, seconds=WINDOW, seed=0)
    ours_loader = make_loader(ds, batch_size=BATCH, shuffle=True)
    base = DataLoader(DecodePerSample(paths), batch_size=BATCH, shuffle=True, num_workers=2)
    reading = best(
        {
            "ours": lambda: epoch_rate(ours_loader, len(ds), min_s=0.5),
            "base": lambda: epoch_rate(base, count),
        },
        args.reps,
    )
    packed = sum(p.stat().st_size for p in out.glob("*.npy"))
    source = sum(p.stat().st_size for p in paths)
    return [
        versus(
            "27aa audio 1 s windows vs per-sample decode+soxr",
            reading["ours"],
            reading["base"],
            "win/s",
            ">= 50x",
        ),
        info(
            "27ab audio disk int16 16 kHz vs source MP3s",
            packed / 1e6,
            source / 1e6,
            "MB",
            "size",
        ),
        versus(
            f"27ac prep audio -j {jobs} vs bare decode+resample",
            packing["pack"],
            packing["bare"],
            "file/s",
            ">= 0.9x",
        ),
    ]


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    """Every media row: audio's here; each kind adds its function's rows."""
    return audio_rows(args, work)
