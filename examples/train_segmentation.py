"""Train a small U-Net on images packed with their masks (the article's MySegmentationModel).

    prep pack data/demo-raw/images data/demo-packed --sizes 128,256 --masks data/demo-raw/masks
    python examples/train_segmentation.py --data data/demo-packed --size 128 --epochs 4

Image and mask travel as uint8; on the device one RandomResizedCrop and flip move both (the
mask with nearest sampling), Normalize makes the image float, and the mask becomes int64 class
ids there for CrossEntropyLoss: 0 is background, k + 1 the shape of class k. Every 8th sample
is held out; each epoch logs pixel accuracy and mean IoU on it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from examples import common as ex
from examples.train_classifier import MEAN, STD
from loaders import Normalize, make_loader
from loaders import transforms as T


def val_batches(
    loader: Iterable[Any], norm: Normalize, env: ex.Env
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for images, masks, _ in loader:
        x, y = ex.to_device([images, masks], env.device)
        yield norm(x).contiguous(memory_format=torch.channels_last), y.long()


def options(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ex.parser(__doc__.split("\n")[0], batch_size=16)
    p.add_argument("--size", type=int, help="the packed size to train at (default: smallest)")
    p.add_argument("--width", type=int, default=16, help="the U-Net's first channels")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[float]:
    """Trains; returns every step's loss."""
    args = options(argv)
    env = ex.setup(args)
    ds = ex.image_dataset(args.data, ("image", "mask", "index"))
    size = args.size or min(ds.sizes)
    ds.set_size(size)
    classes = len(ds.classes or []) + 1  # background, then one id per class's shape
    train, val = ex.holdout(ds)
    loader = make_loader(train, args.batch_size, shuffle=True, num_workers=args.workers)
    val_loader = make_loader(val, args.batch_size)
    net = ex.UNet(3, classes, args.width, depth=2, dims=2)
    model = ex.prepare(net, env, args.compile, channels_last=True)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr)
    aug = T.Compose(
        [T.RandomResizedCrop(size, scale=(0.5, 1.0)), T.RandomHorizontalFlip(0.5)], seed=args.seed
    ).to(env.device)
    norm = Normalize(MEAN, STD).to(env.device)
    loss_fn = nn.CrossEntropyLoss()
    trainer = ex.Trainer(opt, args.limit, env.main)

    def step(batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, int]:
        images, masks, index = ex.to_device(batch, env.device)
        x, y = aug(images, index=index, mask=masks)  # uint8 both, cropped and flipped alike
        x = norm(x).contiguous(memory_format=torch.channels_last)
        with ex.autocast(env.device):
            loss = loss_fn(model(x).float(), y.long())  # uint8 ids -> int64, on the device
        return loss, len(images)

    for epoch in trainer.epochs(args.epochs):
        aug.set_epoch(epoch)
        loader.sampler.set_epoch(epoch)
        stats = trainer.epoch(loader, step)
        acc, miou = ex.segmentation_eval(model, val_batches(val_loader, norm, env), classes)
        ex.report(env, epoch, stats, f", val pixel acc {acc:.3f}, mIoU {miou:.3f}")
    ex.teardown()
    return trainer.losses


if __name__ == "__main__":
    main()
