"""Row 26t: box-aware transforms: the batch pipeline with boxes to move against the same
pipeline without them, on one uint8 batch (256 x 3 x 256 x 256 cropped to 224; the smoke run
32 x 3 x 64 x 64 to 56), 8 boxes a sample as a list, as SampleDataset(ragged="list") gives
them. The boxes ride on the crop and flip already drawn for the pixels: a few small tensor
ops a batch, so the pipeline keeps at least 0.9x its box-less rate."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from bench_augment import JITTER, RATIO, SCALE, _best
from rows import Row, versus


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from loaders import transforms as T

    n, side, size = (32, 64, 56) if args.smoke else (256, 256, 224)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, side, side, 3), dtype=torch.uint8, generator=g)
    x, index = x.permute(0, 3, 1, 2), torch.arange(n)
    corners = torch.rand(n, 8, 2, generator=g) * side * 0.7
    boxes = list(torch.cat([corners, corners + side * 0.3], 2))
    labels = [torch.arange(8) for _ in range(n)]
    aug = T.Compose(
        [
            T.RandomResizedCrop(size, scale=SCALE, ratio=RATIO),
            T.RandomHorizontalFlip(0.5),
            T.ColorJitter(JITTER, JITTER, JITTER),
        ]
    )
    fns: dict[str, Callable[[], Any]] = {
        "boxes": lambda: aug(x, index=index, boxes=boxes, per_box={"labels": labels}),
        "plain": lambda: aug(x, index=index),
    }
    t = _best(fns, max(3, args.reps))
    name = f"26t augment {n}x3x{side}x{side}->{size} + 8 boxes vs none"
    return [versus(name, n / t["boxes"], n / t["plain"], "img/s", ">= 0.9x")]
