"""Train a small 1-D convolutional classifier on windows of a packed audio dataset.

    prep demo --audio data/demo-audio
    prep audio data/demo-audio data/demo-audio-packed --rate 16000 --mono
    python examples/train_audio.py --data data/demo-audio-packed --epochs 8

Each epoch reads one window of `--seconds` a clip, starting where (seed, epoch, index) puts it
(loaders.AudioDataset): a clip is seen at a new offset every epoch, with no decoding. int16
windows go to the device and are scaled there; a random gain is the only augmentation. Every
8th clip is held out and validated on its centred window.
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
from loaders import AudioDataset, make_loader


def conv(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv1d(cin, cout, kernel, stride, kernel // 2, bias=False),
        nn.BatchNorm1d(cout),
        nn.ReLU(inplace=True),
    )


class WaveNet(nn.Module):
    """M5-like: a strided wide first conv on the waveform (a learnt filter bank), three conv
    stages with pooling, global average pooling, a linear head. Any window length."""

    def __init__(self, classes: int, width: int = 32):
        super().__init__()
        self.body = nn.Sequential(
            conv(1, width, 80, 16),
            nn.MaxPool1d(4),
            conv(width, width, 3),
            nn.MaxPool1d(4),
            conv(width, 2 * width, 3),
            nn.MaxPool1d(2),
            conv(2 * width, 2 * width, 3),
        )
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean(dim=2))


def waveforms(audio: torch.Tensor) -> torch.Tensor:
    """int16 (B, W) -> float (B, 1, W) at full scale 1.0, on the batch's device."""
    return (audio.float() / 32768.0).unsqueeze(1)


def accuracy(model: nn.Module, loader: Any, env: ex.Env) -> float:
    """Top-1 on the held-out clips' centred windows (summed over ranks)."""
    counts = torch.zeros(2, device=env.device)
    model.eval()
    with torch.no_grad(), ex.autocast(env.device):
        for batch in loader:
            audio, labels = ex.to_device([batch["audio"], batch["label"]], env.device)
            hits = (model(waveforms(audio)).argmax(1) == labels).sum()
            counts += torch.stack([hits, torch.tensor(len(labels), device=env.device)])
    model.train()
    if env.world > 1:
        torch.distributed.all_reduce(counts)
    return float(counts[0] / counts[1].clamp(min=1))


def options(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ex.parser(__doc__.split("\n")[0], batch_size=32, epochs=8)
    p.add_argument("--seconds", type=float, default=1.0, help="window length")
    p.add_argument("--width", type=int, default=32, help="the first stage's channels")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[float]:
    """Trains; returns every step's loss."""
    args = options(argv)
    env = ex.setup(args)
    ds = AudioDataset(args.data, seconds=args.seconds, seed=args.seed)
    val_ds = AudioDataset(args.data, seconds=args.seconds, random=False)
    if not ds.mono or "label" not in ds.fields:
        raise SystemExit(f"{args.data}: pack it with --mono and labels (class folders)")
    classes = len(ds.declared["label"].classes or [])
    train, _ = ex.holdout(ds)
    _, val = ex.holdout(val_ds)
    loader = make_loader(train, args.batch_size, shuffle=True, num_workers=args.workers)
    val_loader = make_loader(val, args.batch_size)
    net = WaveNet(classes, args.width)
    model = ex.prepare(net, env, args.compile)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-4)
    trainer = ex.Trainer(opt, args.limit, env.main)
    loss_fn = nn.CrossEntropyLoss()
    gains = torch.Generator().manual_seed(args.seed)

    def step(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        audio, labels = ex.to_device([batch["audio"], batch["label"]], env.device)
        gain = torch.empty(len(audio), 1, 1).uniform_(0.5, 1.5, generator=gains)
        with ex.autocast(env.device):
            loss = loss_fn(model(waveforms(audio) * gain.to(env.device)), labels)
        return loss, len(audio)

    for epoch in trainer.epochs(args.epochs):
        ds.set_epoch(epoch)  # new window starts
        loader.sampler.set_epoch(epoch)
        stats = trainer.epoch(loader, step)
        ex.report(env, epoch, stats, f", val acc {accuracy(model, val_loader, env):.3f}")
    ex.teardown()
    return trainer.losses


if __name__ == "__main__":
    main()
