"""Train a small ResNet on a packed image dataset, with progressive resizing over its sizes.

    prep pack data/demo-raw/images data/demo-packed --sizes 128,256
    python examples/train_classifier.py --data data/demo-packed --epochs 4
    torchrun --nproc-per-node 8 examples/train_classifier.py --data /shared/packed --compile

Epoch e trains at the packed size sizes[e * len(sizes) // epochs] (smallest first, as FFCV's
160 -> 192 ramp) and validates at the largest. uint8 batches go to the device; the crop,
flip, jitter, Normalize and MixUp/CutMix run there on the whole batch; the model is
channels-last, under bf16 autocast on CUDA. Every 8th sample is held out for validation.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from examples import common as ex
from loaders import Normalize, make_loader
from loaders import transforms as T

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]  # ImageNet's, in pixel units (0-255)
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


class Block(nn.Module):
    """ResNet's basic block: two 3x3 convs and a shortcut (a strided 1x1 when shapes change)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        # The shortcut pools, then a 1x1 conv (ResNet-D): a strided 1x1 conv's backward on a
        # channels-last batch segfaults on the CPU in torch 2.13 (on CUDA it is fine).
        self.short: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            pool: nn.Module = nn.AvgPool2d(stride) if stride != 1 else nn.Identity()
            self.short = nn.Sequential(
                pool, nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.short(x))


class ResNet(nn.Module):
    """A ResNet-ish classifier for any input size: stem, one block per width (each halving the
    grid after the first), global average pooling, a linear head."""

    def __init__(self, classes: int, widths: Sequence[int] = (32, 64, 128)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 2, 1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        cins = [widths[0], *widths[:-1]]
        self.blocks = nn.Sequential(
            *(
                Block(a, b, 1 if i == 0 else 2)
                for i, (a, b) in enumerate(zip(cins, widths, strict=True))
            )
        )
        self.head = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


def size_at(sizes: Sequence[int], epoch: int, epochs: int) -> int:
    """Progressive resizing: the packed sizes in equal runs of epochs, smallest first."""
    ordered = sorted(sizes)
    return ordered[min(len(ordered) - 1, epoch * len(ordered) // max(1, epochs))]


def augment(size: int, classes: int, mix: str, seed: int, crop: float = 0.35) -> T.Compose:
    """The training pipeline; `crop` is RandomResizedCrop's smallest share of the area (1: no
    crop, the packed image as it is)."""
    ops: list[nn.Module] = [T.RandomResizedCrop(size, scale=(crop, 1.0))] if crop < 1 else []
    ops += [
        T.RandomHorizontalFlip(0.5),
        T.ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2),
        Normalize(MEAN, STD),
    ]
    if mix == "mixup":
        ops.append(T.MixUp(alpha=0.2, num_classes=classes))
    elif mix == "cutmix":
        ops.append(T.CutMix(alpha=1.0, num_classes=classes))
    return T.Compose(ops, seed=seed)


def accuracy(model: nn.Module, loader: Any, env: ex.Env) -> float:
    """Top-1 on the held-out samples (summed over ranks), at the dataset's current size."""
    norm = Normalize(MEAN, STD).to(env.device)
    counts = torch.zeros(2, device=env.device)
    model.eval()
    with torch.no_grad(), ex.autocast(env.device):
        for images, labels, _ in loader:
            x, y = ex.to_device([images, labels], env.device)
            x = norm(x).contiguous(memory_format=torch.channels_last)
            counts += torch.stack([(model(x).argmax(1) == y).sum(), torch.tensor(len(y))])
    model.train()
    if env.world > 1:
        torch.distributed.all_reduce(counts)
    return float(counts[0] / counts[1].clamp(min=1))


def options(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ex.parser(__doc__.split("\n")[0], batch_size=64)
    p.add_argument("--width", type=int, default=32, help="the first stage's channels")
    p.add_argument("--mix", choices=["none", "mixup", "cutmix"], default="none")
    p.add_argument(
        "--crop-scale",
        type=float,
        default=0.35,
        help="random crops of at least this share of the image (1: none; small datasets)",
    )
    ex.checkpoint_options(p)
    p.add_argument(
        "--cross-val",
        type=int,
        default=0,
        metavar="K",
        help="train K models, each without one of K folds, and save every sample's class "
        "probabilities from the model that did not see it to --predictions (prep labels)",
    )
    p.add_argument("--predictions", default="preds.npy", help="--cross-val's output (.npy)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[float]:
    """Trains; returns every step's loss."""
    args = options(argv)
    env = ex.setup(args)
    ds = ex.image_dataset(args.data, ("image", "label", "index"))
    classes = len(ds.classes or [])
    if args.cross_val:
        return cross_validate(args, env, ds, classes)
    train, val = ex.holdout(ds)
    loader = make_loader(train, args.batch_size, shuffle=True, num_workers=args.workers)
    val_loader = make_loader(val, args.batch_size)
    net = ResNet(classes, [args.width * 2**i for i in range(3)])
    model = ex.prepare(net, env, args.compile, channels_last=True)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=5e-4)
    trainer = ex.Trainer(opt, args.limit, env.main)
    loss_fn = nn.CrossEntropyLoss()

    def step(batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, int]:
        images, labels, index = ex.to_device(batch, env.device)
        x, y = aug(images, labels, index=index)
        with ex.autocast(env.device):
            loss = loss_fn(model(x.contiguous(memory_format=torch.channels_last)), y)
        return loss, len(images)

    saved = {"model": net, "optimizer": opt, "loader": loader}
    start = ex.Checkpoint(args, env, saved, trainer, ids=lambda batch: batch[2]).resume()
    for epoch in trainer.epochs(args.epochs, start):
        size = size_at(ds.sizes, epoch, args.epochs)
        ds.set_size(size)
        aug = augment(size, classes, args.mix, args.seed, args.crop_scale).to(env.device)
        aug.set_epoch(epoch)
        loader.sampler.set_epoch(epoch)
        stats = trainer.epoch(loader, step)
        ds.set_size(max(ds.sizes))
        ex.report(env, epoch, stats, f", {size} px, val acc {accuracy(model, val_loader, env):.3f}")
    ex.teardown()
    return trainer.losses


def cross_validate(args: argparse.Namespace, env: ex.Env, ds: Any, classes: int) -> list[float]:
    """--cross-val K: fold k holds the samples i with i % K == k; each fold's probabilities come
    from a model trained on the others (out-of-sample, as confident learning needs them), at
    the largest size. Saves (N, classes) float32 to --predictions; returns every step's loss."""
    import numpy as np
    from torch.utils.data import Subset

    if env.world > 1 or args.cross_val < 2:
        raise SystemExit("--cross-val K: K >= 2, in one process (not under torchrun)")
    n, k = len(ds), args.cross_val
    probs = np.zeros((n, classes), np.float32)
    losses: list[float] = []
    norm = Normalize(MEAN, STD).to(env.device)
    for fold in range(k):
        seen = Subset(ds, [i for i in range(n) if i % k != fold])
        net, trainer = fit(args, env, ds, seen, classes, args.seed + fold)
        held = Subset(ds, list(range(fold, n, k)))
        with torch.no_grad():
            for images, _, index in make_loader(held, args.batch_size):
                x = norm(images.to(env.device)).contiguous(memory_format=torch.channels_last)
                probs[index.numpy()] = torch.softmax(net(x).float(), 1).cpu().numpy()
        losses += trainer.losses
        print(f"fold {fold + 1}/{k}: trained on {len(seen)}, predicted {len(held)}", flush=True)
    np.save(args.predictions, probs)
    right = float((probs.argmax(1) == ds_labels(ds)).mean())
    print(f"saved {args.predictions}: {n} x {classes}, accuracy on the given labels {right:.3f}")
    return losses


def fit(
    args: argparse.Namespace, env: ex.Env, ds: Any, seen: Any, classes: int, seed: int
) -> tuple[nn.Module, ex.Trainer]:
    """A fresh model trained on `seen` as main() trains (no MixUp), left in eval mode at the
    dataset's largest size."""
    net = ex.prepare(ResNet(classes, [args.width * 2**i for i in range(3)]), env, False, True)
    trainer = ex.Trainer(torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=5e-4))
    trainer.limit, trainer.log = args.limit, False
    loader = make_loader(seen, args.batch_size, shuffle=True, num_workers=args.workers)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in trainer.epochs(args.epochs):
        size = size_at(ds.sizes, epoch, args.epochs)
        ds.set_size(size)
        aug = augment(size, classes, "none", seed, args.crop_scale).to(env.device)
        aug.set_epoch(epoch)
        loader.sampler.set_epoch(epoch)

        def step(batch: Sequence[torch.Tensor], aug: T.Compose = aug) -> tuple[torch.Tensor, int]:
            images, labels, index = ex.to_device(batch, env.device)
            x, y = aug(images, labels, index=index)
            with ex.autocast(env.device):
                loss = loss_fn(net(x.contiguous(memory_format=torch.channels_last)), y)
            return loss, len(images)

        trainer.epoch(loader, step)
    ds.set_size(max(ds.sizes))
    return net.eval(), trainer


def ds_labels(ds: Any) -> Any:
    """Every sample's stored label, int64 (N,)."""
    from loaders import SampleDataset

    whole = SampleDataset(ds.store.root, fields=["label"])
    return whole.__getitems__(list(range(len(whole))))["label"].numpy()


if __name__ == "__main__":
    main()
