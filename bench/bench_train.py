"""Rows 10a-10f: one training loop and model (examples/train_classifier.py's ResNet), fed 3 ways.

1. the prep loader: `make_loader` over the JPEGs packed once at SIZE px, with a worker per
   core (10a-10d) and with none, reading in the training process (10e-10f);
2. an ImageFolder-style dataset decoding the same JPEGs with PIL and resizing them per sample,
   in a DataLoader with a worker per core;
3. synthetic uint8 batches already on the device: the upper bound, no loading at all.

Each feed runs the same steps (uint8 batch to the device, Normalize, channels-last, forward,
backward, AdamW), after a warm-up of WARM steps (worker start-up, page cache); samples/s and
the data-wait fraction (the share of step time blocked on the next batch) are measured per feed,
interleaved over --reps repeats, the best rate of each counting.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from bench_load import FolderDataset
from bench_pack import jpeg_list
from rows import PREP, Row, info, run, versus
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: `examples`

from examples import common as ex
from examples.train_classifier import MEAN, STD, ResNet

SIZE, BATCH, WIDTH, WARM = 64, 16, 16, 2
COUNT = 160  # JPEGs per epoch: the PIL feed decodes photos up to 4032 px, a few per second
STEPS = 20  # timed steps per feed and repeat (over epochs): one step alone is noise here


class Run:
    """The model, optimiser and step that every feed trains with."""

    def __init__(self, device: torch.device):
        from loaders import Normalize

        torch.manual_seed(0)
        self.device = device
        self.model = ResNet(4, [WIDTH, 2 * WIDTH, 4 * WIDTH]).to(device)
        self.model = self.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.norm = Normalize(MEAN, STD).to(device)
        self.loss = nn.CrossEntropyLoss()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)

    def step(self, batch: Any) -> tuple[torch.Tensor, int]:
        images, labels = ex.to_device(batch[:2], self.device)
        x = self.norm(images).contiguous(memory_format=torch.channels_last)
        with ex.autocast(self.device):
            return self.loss(self.model(x), labels.long() % 4), len(images)

    def measure(self, loader: Iterable[Any], steps: int) -> tuple[float, float]:
        """(samples/s, data-wait fraction) over `steps` steps, after WARM steps that start the
        workers and fill the page cache (not timed)."""
        ex.Trainer(self.opt, WARM, log=False).epoch(loader, self.step)
        trainer, total = ex.Trainer(self.opt, steps, log=False), ex.Stats()
        for _ in trainer.epochs(0):
            stats = trainer.epoch(loader, self.step)
            total.wait, total.total = total.wait + stats.wait, total.total + stats.total
            total.samples += stats.samples
        return total.samples / total.total, total.wait / total.total


def feeds(packed: Path, paths: list[str], device: torch.device) -> dict[str, Iterable[Any]]:
    from loaders import ImageShardDataset, make_loader

    ds = ImageShardDataset(packed, size=SIZE, fields=("image", "label"))
    cores = os.cpu_count() or 1
    folder: Iterable[Any] = torch.utils.data.DataLoader(
        FolderDataset(paths, SIZE),  # type: ignore[arg-type]
        batch_size=BATCH,
        shuffle=True,
        num_workers=cores,
        persistent_workers=True,
    )
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (len(paths), 3, SIZE, SIZE), dtype=torch.uint8, generator=g)
    labels = torch.zeros(len(paths), dtype=torch.long)
    synthetic = [
        (images[i : i + BATCH].to(device), labels[i : i + BATCH].to(device))
        for i in range(0, len(paths), BATCH)
    ]
    return {
        "prep": make_loader(ds, BATCH, shuffle=True, num_workers=cores),
        "prep0": make_loader(ds, BATCH, shuffle=True),  # read in the training process
        "folder": folder,
        "synthetic": synthetic,
    }


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    raw = work / "raw"
    _, paths = jpeg_list(raw, min(args.sample, COUNT))
    packed = work / f"train-p{SIZE}"
    run(
        [
            *PREP,
            "pack",
            str(raw / "jpegs.csv"),
            str(packed),
            "--sizes",
            str(SIZE),
            "-q",
            "--overwrite",
            "-j",
            str(args.jobs),
        ]
    )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loaders = feeds(packed, paths, device)
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.reps):
        for name, loader in loaders.items():
            rate, wait = Run(device).measure(loader, 4 if args.smoke else STEPS)
            if rate > best.get(name, (0.0, 0.0))[0]:
                best[name] = (rate, wait)
    (ours, w_ours), (folder, w_folder) = best["prep"], best["folder"]
    (synth, w_synth), (ours0, w_ours0) = best["synthetic"], best["prep0"]
    where = f"{device.type}, {len(paths)} JPEGs at {SIZE} px, batch {BATCH}"
    print(f"   (train: {where}; synthetic {synth:.0f} samples/s)", file=sys.stderr)
    return [
        versus("10a train: prep loader vs ImageFolder+PIL", ours, folder, "img/s", ">= 2x"),
        versus("10b train: prep loader vs synthetic on device", ours, synth, "img/s", ">= 0.8x"),
        info(
            "10c data wait: prep loader vs ImageFolder", 100 * w_ours, 100 * w_folder, "%", "info"
        ),
        info("10d data wait: synthetic vs prep loader", 100 * w_synth, 100 * w_ours, "%", "info"),
        versus("10e train: prep, 0 workers, vs synthetic", ours0, synth, "img/s", ">= 0.8x"),
        info("10f data wait: prep, 0 workers, vs 1 a core", 100 * w_ours0, 100 * w_ours, "%", "-"),
    ]
