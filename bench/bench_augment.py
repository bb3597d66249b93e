"""Rows 11a-11e: loaders.transforms on a uint8 batch against kornia and a per-image loop.

One synthetic batch, 256 x 3 x 256 x 256 uint8 (the smoke run: 32 x 3 x 64 x 64), channels-last
as the datasets return it, cropped to 224 (56), flipped and colour-jittered per sample. No
packed data is needed. kornia takes floats in [0, 1], so its time includes that conversion.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from rows import Row, info, versus

SCALE, RATIO, JITTER = (0.35, 1.0), (3 / 4, 4 / 3), 0.2


def ours(size: int) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    from loaders import transforms as T

    aug = T.Compose(
        [
            T.RandomResizedCrop(size, scale=SCALE, ratio=RATIO),
            T.RandomHorizontalFlip(0.5),
            T.ColorJitter(JITTER, JITTER, JITTER),
        ]
    )
    return lambda x, index: aug(x, index=index)


def kornia_ops(size: int) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    import kornia.augmentation as K

    aug = torch.nn.Sequential(
        K.RandomResizedCrop((size, size), scale=SCALE, ratio=RATIO),
        K.RandomHorizontalFlip(p=0.5),
        K.ColorJitter(JITTER, JITTER, JITTER, 0.0, p=1.0),
    )
    return lambda x, index: aug(x.float() / 255)


def _jitter_one(img: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """torchvision's adjust_brightness, _contrast, _saturation on one float image (C, H, W)."""
    luma = torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)
    b, c, s = (rng.uniform(1 - JITTER, 1 + JITTER) for _ in range(3))
    img = (img * b).clamp(0, 255)
    img = (c * img + (1 - c) * (img * luma).sum(0).mean()).clamp(0, 255)
    return (s * img + (1 - s) * (img * luma).sum(0, keepdim=True)).clamp(0, 255)


def per_image(size: int) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    """What users write around torchvision v2 for per-sample draws: one call per image."""
    rng = random.Random(0)

    def one(img: torch.Tensor) -> torch.Tensor:
        _, h, w = img.shape
        area = h * w * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        bw, bh = min(w, round(math.sqrt(area * aspect))), min(h, round(math.sqrt(area / aspect)))
        top, left = rng.randint(0, h - bh), rng.randint(0, w - bw)
        crop = img[None, :, top : top + bh, left : left + bw].float()
        out = F.interpolate(crop, size=(size, size), mode="bilinear", antialias=True)[0]
        if rng.random() < 0.5:
            out = out.flip(-1)
        return _jitter_one(out, rng).round().to(torch.uint8)

    return lambda x, index: torch.stack([one(img) for img in x])


def _best(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Seconds per call of each, interleaved repeats, the best of each (after a warm-up call)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for _ in range(reps):
        for k, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    return {k: min(v) for k, v in times.items()}


def _single_ops(x: torch.Tensor, index: torch.Tensor, size: int) -> dict[str, Callable[[], Any]]:
    """Each op alone, ours and kornia's, on the same batch (jitter on the cropped batch)."""
    import kornia.augmentation as K

    from loaders import transforms as T

    small = x[:, :, :size, :size].contiguous(memory_format=torch.channels_last)
    pairs = {
        "crop": (
            T.RandomResizedCrop(size, SCALE, RATIO),
            K.RandomResizedCrop((size,) * 2, SCALE, RATIO),
            x,
        ),
        "flip": (T.RandomHorizontalFlip(), K.RandomHorizontalFlip(), small),
        "jitter": (
            T.ColorJitter(JITTER, JITTER, JITTER),
            K.ColorJitter(JITTER, JITTER, JITTER, 0.0, p=1.0),
            small,
        ),
    }
    fns: dict[str, Callable[[], Any]] = {}
    for name, (op, kop, inp) in pairs.items():
        fns[name] = lambda op=op, inp=inp: op(inp, index=index)
        fns[f"kornia {name}"] = lambda kop=kop, inp=inp: kop(inp.float() / 255)
    return fns


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    n, side, size = (32, 64, 56) if args.smoke else (256, 256, 224)
    g = torch.Generator().manual_seed(0)
    hwc = torch.randint(0, 256, (n, side, side, 3), dtype=torch.uint8, generator=g)
    x, index = hwc.permute(0, 3, 1, 2), torch.arange(n)
    pipes = {"ours": ours(size), "kornia": kornia_ops(size), "loop": per_image(size)}
    fns: dict[str, Callable[[], Any]] = {k: (lambda p=p: p(x, index)) for k, p in pipes.items()}
    fns.update(_single_ops(x, index, size))
    t = _best(fns, max(2, args.reps))
    shape = f"{n}x3x{side}x{side}->{size}"
    out = [
        versus(f"11a augment {shape} vs kornia", n / t["ours"], n / t["kornia"], "img/s", ">= 2x"),
        versus(
            f"11b augment {shape} vs per-image loop", n / t["ours"], n / t["loop"], "img/s", ">= 5x"
        ),
    ]
    for letter, op in zip("cde", ("crop", "flip", "jitter"), strict=True):
        ms, kms = 1000 * t[op], 1000 * t[f"kornia {op}"]
        out.append(info(f"11{letter} {op} alone vs kornia (ms a batch)", ms, kms, "ms", "info"))
    return out
