"""Rows 41a-41b: the whole-batch ops CUDA runs (issue 41), on this machine's device.

41a: RandomResizedCrop + flip + colour jitter of a uint8 batch, 256 x 3 x 256 x 256 to 224 (the
smoke run: 32 x 3 x 64 x 64 to 56), by the whole-batch crop (one grid_sample, the flip and the
jitter folded in) on CUDA where there is one, else on the CPU (cpu_kernel=False), against the CPU
kernel on the same batch. 41b: Normalize of that batch on the same device. Without CUDA the rows
say "cpu": unmeasured on a GPU. `make gpu-check` measures the rest (decode, training).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rows import Row, info


def _ms(fn: Callable[[], Any], sync: Callable[[], Any], reps: int = 5) -> float:
    fn()  # warm-up
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return 1000 * (time.perf_counter() - start) / reps


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from loaders import Normalize
    from loaders import transforms as T

    n, side, size = (32, 64, 56) if args.smoke else (256, 256, 224)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, side, side, 3), dtype=torch.uint8, generator=g)
    x = x.permute(0, 3, 1, 2)  # channels-last, as the datasets return it
    index = torch.arange(n)
    ops = [T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4)]
    kernel = T.Compose(ops)
    whole = T.Compose(ops, cpu_kernel=False)
    xd, idx = x.to(device), index.to(device)
    ms_kernel = _ms(lambda: kernel(x, index=index), lambda: None)
    ms_whole = _ms(lambda: whole(xd, index=idx), sync)
    norm = Normalize([124.0, 116.0, 104.0], [58.0, 57.0, 57.0]).to(device)
    ms_norm = _ms(lambda: norm(xd), sync)
    shape = f"{n}x3x{side}^2"
    note = device if device == "cuda" else "cpu: unmeasured on a GPU"
    return [
        info(
            f"41a crop+flip+jitter {shape}, whole-batch ops vs CPU kernel",
            ms_whole,
            ms_kernel,
            "ms",
            note,
        ),
        info(f"41b Normalize {shape} (ms a batch)", ms_norm, ms_norm, "ms", note),
    ]
