"""Train a small 3-D conv net to tell which way a shape moves in a clip (the video demo).

    prep demo --video data/demo-video
    prep video data/demo-video data/demo-clips --fps 8 --size 64 --codec jpeg
    python examples/train_video.py --data data/demo-clips --frames 8 --epochs 20

ClipDataset cuts each clip out of the packed frames: a start drawn from (seed, epoch, index),
one random crop for all its frames (no flip: a mirrored clip would move the other way), JPEG
frames decoded on the loader's threads. The clips travel as uint8 (B, T, C, H, W) and become
float on the device. Every fourth video is held out; each epoch logs accuracy on its middle
clip.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.data import Subset

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from examples import common as ex
from loaders import CenterCrop, ClipDataset, RandomResizedCrop, make_loader


class ClipNet(nn.Module):
    """(B, T, C, H, W) float clips (T >= 2) -> class logits: two 3-D conv blocks over the
    frames and their differences, then a global max pool (the shape is small: where it moves
    matters, not how much of the frame it covers; an average pool barely learned here).
    GroupNorm, not BatchNorm: a few dozen steps leave BatchNorm's running statistics, which
    evaluation uses, far from the batches' own."""

    def __init__(self, classes: int, width: int = 16):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv3d(6, width, (3, 5, 5), stride=(1, 2, 2), padding=(1, 2, 2)),
            nn.GroupNorm(4, width),
            nn.ReLU(inplace=True),
            nn.Conv3d(width, 2 * width, 3, stride=2, padding=1),
            nn.GroupNorm(4, 2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveMaxPool3d(1),
        )
        self.head = nn.Linear(2 * width, classes)

    def forward(self, clips: torch.Tensor) -> torch.Tensor:
        # Each frame with its difference from the one before: a moving edge's sign pattern
        # (bright ahead, dark behind) shows the direction within one frame.
        x = torch.cat([clips[:, 1:], clips[:, 1:] - clips[:, :-1]], dim=2)
        return self.head(self.body(x.permute(0, 2, 1, 3, 4)).flatten(1))  # (B, C, T, H, W)


def scale(clips: torch.Tensor) -> torch.Tensor:
    """uint8 clips to float -1..1, on the device."""
    return clips.float() / 127.5 - 1


def options(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ex.parser(__doc__.split("\n")[0], batch_size=8, epochs=20)
    p.add_argument("--frames", type=int, default=8, help="frames a clip")
    p.add_argument("--stride", type=int, default=1, help="stored frames between clip frames")
    p.add_argument("--crop", type=int, default=48, help="clip side in px")
    p.add_argument("--width", type=int, default=16, help="the net's first channels")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[float]:
    """Trains; returns every step's loss."""
    args = options(argv)
    env = ex.setup(args)
    crop = RandomResizedCrop(args.crop, scale=(0.5, 1.0), seed=args.seed)
    ds = ClipDataset(args.data, args.frames, args.stride, crop=crop, seed=args.seed)
    held = ClipDataset(args.data, args.frames, args.stride, crop=CenterCrop(args.crop, 1.0))
    classes = len(ds.store.manifest.classes or []) or 1
    keep = [i for i in range(len(ds)) if i % 4 != 3]
    loader = make_loader(Subset(ds, keep), args.batch_size, shuffle=True, num_workers=args.workers)
    val = make_loader(Subset(held, range(3, len(held), 4)), args.batch_size)
    net = ClipNet(classes, args.width)
    model = ex.prepare(net, env, args.compile)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    trainer = ex.Trainer(opt, args.limit, env.main)

    def step(batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, int]:
        clips, label = ex.to_device(batch, env.device)
        with ex.autocast(env.device):
            loss = loss_fn(model(scale(clips)).float(), label)
        return loss, len(clips)

    for epoch in trainer.epochs(args.epochs):
        ds.set_epoch(epoch)  # new starts and crops
        loader.sampler.set_epoch(epoch)
        stats = trainer.epoch(loader, step)
        model.eval()
        right = seen = 0
        with torch.no_grad():
            for batch in val:
                clips, label = ex.to_device(batch, env.device)
                right += int((model(scale(clips)).argmax(1) == label).sum())
                seen += len(label)
        model.train()
        ex.report(env, epoch, stats, f", val acc {right / max(1, seen):.3f}")
    ex.teardown()
    return trainer.losses


if __name__ == "__main__":
    main()
