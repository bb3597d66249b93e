"""Train a small 3-D U-Net on patches of packed volumes (CT-like phantoms in the demo).

    prep demo --volumes data/demo-ct
    prep volumes data/demo-ct/images data/demo-volumes --labels data/demo-ct/labels \\
        --spacing 1.5,1.5,1.5 --window -1000,400 --crop-foreground
    python examples/train_volumes.py --data data/demo-volumes --patch 32 --epochs 4

PatchDataset cuts each patch as one slice of its volume's memory map (a third of them centred
on a labelled voxel); the voxels travel in their stored dtype and become float on the device:
uint8 (a --window pack) to -1..1, int16 (HU) divided by 1000. The last volume is held out;
each epoch logs voxel accuracy and mean IoU on fixed patches of it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import Subset

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from examples import common as ex
from loaders import PatchDataset, make_loader


def scale(x: torch.Tensor) -> torch.Tensor:
    """Stored voxels to float: uint8 0..255 -> -1..1; int16 HU / 1000 (air -1, water 0)."""
    if x.dtype == torch.uint8:
        return x.float() / 127.5 - 1
    return x.float() / 1000


def volumes(ds: PatchDataset) -> int:
    return len(ds) // ds.per_volume


def count_classes(ds: PatchDataset) -> int:
    """1 + the largest label id of any volume (one read of each label volume)."""
    return 1 + max(int(ds.volume(v, "label").max()) for v in range(volumes(ds)))


def split(args: argparse.Namespace) -> tuple[PatchDataset, Subset[Any], Subset[Any]]:
    """(the train dataset, its patches of every volume but the last, the last's patches)."""
    ds = PatchDataset(args.data, patch=[args.patch] * 3, per_volume=args.per_volume)
    if volumes(ds) < 2:
        raise SystemExit(f"{args.data} has {volumes(ds)} volume: need 2 (one held out)")
    held = PatchDataset(args.data, [args.patch] * 3, per_volume=8, foreground=0.5, seed=1)
    cut = (volumes(ds) - 1) * args.per_volume
    return ds, Subset(ds, range(cut)), Subset(held, range((volumes(held) - 1) * 8, len(held)))


def val_batches(loader: Iterable[Any], env: ex.Env) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for image, label in loader:
        x, y = ex.to_device([image, label], env.device)
        yield scale(x), y[:, 0].long()


def options(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ex.parser(__doc__.split("\n")[0], batch_size=2, epochs=4)
    p.add_argument("--patch", type=int, default=32, help="patch side in voxels (divisible by 4)")
    p.add_argument("--per-volume", type=int, default=8, help="patches per volume and epoch")
    p.add_argument("--width", type=int, default=8, help="the U-Net's first channels")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[float]:
    """Trains; returns every step's loss."""
    args = options(argv)
    env = ex.setup(args)
    ds, train, val = split(args)
    classes = count_classes(ds)
    loader = make_loader(train, args.batch_size, shuffle=True, num_workers=args.workers)
    val_loader = make_loader(val, args.batch_size)
    net = ex.UNet(1, classes, args.width, depth=2, dims=3)
    model = ex.prepare(net, env, args.compile)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    trainer = ex.Trainer(opt, args.limit, env.main)

    def step(batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, int]:
        image, label = ex.to_device(batch, env.device)
        with ex.autocast(env.device):
            loss = loss_fn(model(scale(image)).float(), label[:, 0].long())
        return loss, len(image)

    for epoch in trainer.epochs(args.epochs):
        ds.set_epoch(epoch)  # new patch centres
        loader.sampler.set_epoch(epoch)
        stats = trainer.epoch(loader, step)
        acc, miou = ex.segmentation_eval(model, val_batches(val_loader, env), classes)
        ex.report(env, epoch, stats, f", val voxel acc {acc:.3f}, mIoU {miou:.3f}")
    ex.teardown()
    return trainer.losses


if __name__ == "__main__":
    main()
