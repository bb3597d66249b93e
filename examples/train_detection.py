"""Train a small single-stage detector (CenterNet-style) on an imported COCO dataset.

    prep import coco data/demo-raw/coco.json data/demo-raw/images data/demo-coco --sizes 256
    python examples/train_detection.py --data data/demo-coco --size 128 --epochs 8

The dataset does the augmentation as it reads a batch, in the loader's workers:
`SampleDataset(transforms=Compose([RandomResizedCrop, RandomHorizontalFlip]))` moves each
image's boxes with its pixels and drops the boxes a crop leaves under 1 px, with their labels.
Boxes come as a list of (N, 4) tensors a sample (ragged="list"). The network predicts, on a
grid of stride 8, a heatmap of object centres per class, and each centre's box size and
sub-cell offset; every epoch logs the held-out recall: the share of boxes found by one of the
10 best detections of their class at IoU >= 0.5.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from examples import common as ex
from examples.train_classifier import MEAN, STD
from loaders import CenterCrop, Normalize, SampleDataset, make_loader
from loaders import transforms as T

STRIDE = 8


class CenterNet(nn.Module):
    """Three stride-2 conv blocks, then heads: centre logits (classes), box size (w, h in grid
    cells, as a log) and the centre's offset in its cell, each (B, ., H / 8, W / 8)."""

    def __init__(self, classes: int, width: int = 32):
        super().__init__()
        widths = [3, width // 2, width, 2 * width]
        self.body = nn.Sequential(
            *(
                nn.Sequential(
                    nn.Conv2d(a, b, 3, stride=2, padding=1, bias=False),
                    nn.BatchNorm2d(b),
                    nn.ReLU(inplace=True),
                )
                for a, b in itertools.pairwise(widths)
            ),
            ex.conv_block(2 * width, 2 * width, dims=2),
        )
        self.head = nn.Conv2d(2 * width, classes + 4, 1)
        with torch.no_grad():
            self.head.bias[:classes] = -2.2  # type: ignore[index]  # a prior of ~0.1 for centres

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def targets(
    boxes: Sequence[torch.Tensor], labels: Sequence[torch.Tensor], classes: int, grid: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each sample's boxes (pixels) as CenterNet's targets: a Gaussian heat (B, classes, g, g)
    around each centre; the centres' cells (M, 3: sample, row, col), log sizes and offsets."""
    heat = torch.zeros(len(boxes), classes, grid, grid)
    ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    cells, sizes, offsets = [], [], []
    for b, (bx, lab) in enumerate(zip(boxes, labels, strict=True)):
        for (x0, y0, x1, y1), c in zip((bx / STRIDE).tolist(), lab.tolist(), strict=True):
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            col, row = min(int(cx), grid - 1), min(int(cy), grid - 1)
            sigma = max(0.5, min(x1 - x0, y1 - y0) / 6)
            g = torch.exp(-((xs - col) ** 2 + (ys - row) ** 2) / (2 * sigma**2))
            heat[b, c] = torch.maximum(heat[b, c], g)
            cells.append((b, row, col))
            sizes.append((max(x1 - x0, 1e-3), max(y1 - y0, 1e-3)))
            offsets.append((cx - col, cy - row))
    as_tensor = lambda v, n: torch.tensor(v, dtype=torch.float32).reshape(-1, n)  # noqa: E731
    cell = torch.tensor(cells, dtype=torch.int64).reshape(-1, 3)
    return heat, cell, as_tensor(sizes, 2).log(), as_tensor(offsets, 2)


def focal(logits: torch.Tensor, heat: torch.Tensor) -> torch.Tensor:
    """CenterNet's focal loss on centre heatmaps, per object (alpha 2, beta 4)."""
    p = logits.sigmoid().clamp(1e-4, 1 - 1e-4)
    peak = heat.eq(1).float()
    pos = -(peak * (1 - p) ** 2 * p.log()).sum()
    neg = -((1 - peak) * (1 - heat) ** 4 * p**2 * (1 - p).log()).sum()
    return (pos + neg) / peak.sum().clamp_min(1)


def loss_of(out: torch.Tensor, batch: dict[str, Any], classes: int) -> torch.Tensor:
    heat, cell, size, offset = (
        t.to(out.device) for t in targets(batch["boxes"], batch["labels"], classes, out.shape[-1])
    )
    loss = focal(out[:, :classes], heat)
    if len(cell):
        at = out[cell[:, 0], :, cell[:, 1], cell[:, 2]]  # (M, classes + 4)
        loss = loss + 0.1 * F.l1_loss(at[:, classes : classes + 2], size)
        loss = loss + F.l1_loss(at[:, classes + 2 :].sigmoid(), offset)
    return loss


def detect(out: torch.Tensor, classes: int, k: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best detections of each class a sample: boxes (B, classes, k, 4) in pixels and
    their scores (B, classes, k), peaks of the heatmap (3 x 3 max-pooled)."""
    g = out.shape[-1]
    heat = out[:, :classes].sigmoid()
    heat = heat * (F.max_pool2d(heat, 3, stride=1, padding=1) == heat)
    scores, where = heat.flatten(2).topk(min(k, g * g), dim=2)
    row, col = where // g, where % g
    rest = out[:, classes:].flatten(2)  # (B, 4, g * g)
    pick = lambda c: rest[:, c].gather(1, where.flatten(1)).view_as(where)  # noqa: E731
    w, h = pick(0).exp(), pick(1).exp()
    cx, cy = col + pick(2).sigmoid(), row + pick(3).sigmoid()
    boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1) * STRIDE
    return boxes, scores


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of boxes a (N, 4) against b (M, 4), xyxy: (N, M)."""
    lo, hi = (
        torch.maximum(a[:, None, :2], b[None, :, :2]),
        torch.minimum(a[:, None, 2:], b[None, :, 2:]),
    )
    inter = (hi - lo).clamp_min(0).prod(-1)
    area = lambda t: (t[:, 2:] - t[:, :2]).clamp_min(0).prod(-1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter).clamp_min(1e-9)


def recall(
    model: nn.Module, loader: Iterable[Any], norm: nn.Module, env: ex.Env, classes: int
) -> float:
    """The share of boxes matched at IoU >= 0.5 by one of the 10 best detections of their
    class (a detector's recall at 10 detections, as COCO's AR@10 at one threshold)."""
    found = total = 0
    model.eval()
    with torch.no_grad():
        for batch in loader:
            x = norm(batch["image"].to(env.device))
            boxes, _ = detect(model(x).float(), classes)
            for b, (truth, labels) in enumerate(zip(batch["boxes"], batch["labels"], strict=True)):
                for box, c in zip(truth.to(env.device), labels.tolist(), strict=True):
                    found += int(box_iou(box[None], boxes[b, c]).max() >= 0.5)
                    total += 1
    model.train()
    return found / max(1, total)


def dataset(args: argparse.Namespace, aug: T.Compose | None) -> SampleDataset:
    """The dataset at --size; mode keep's images (each its own shape) centre-cropped to it."""
    probe = SampleDataset(args.data, fields=("labels",))
    size = args.size or min(probe.sizes)
    image: Any = probe.declared["image"]
    crop = CenterCrop(size, ratio=1.0) if image.mode == "keep" else None
    fields = ("image", "boxes", "labels")
    return SampleDataset(args.data, fields, size=size, crop=crop, ragged="list", transforms=aug)


def options(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ex.parser(__doc__.split("\n")[0], batch_size=16)
    p.add_argument("--size", type=int, help="the packed size to read (default: smallest)")
    p.add_argument("--crop", type=int, help="the side trained at, a multiple of 8 (default: size)")
    p.add_argument("--width", type=int, default=32, help="the backbone's channels")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[float]:
    """Trains; returns every step's loss."""
    args = options(argv)
    env = ex.setup(args)
    probe = SampleDataset(args.data, fields=("labels",))
    classes = len(probe.store.manifest.extra["coco"]["categories"])
    side = args.crop or args.size or min(probe.sizes)
    aug = T.Compose(
        [T.RandomResizedCrop(side, scale=(0.4, 1.0)), T.RandomHorizontalFlip()], seed=args.seed
    )
    augmented = dataset(args, aug)
    train, _ = ex.holdout(augmented)
    _, val = ex.holdout(dataset(args, None))
    loader = make_loader(train, args.batch_size, shuffle=True, num_workers=args.workers)
    val_loader = make_loader(val, args.batch_size)
    net = CenterNet(classes, args.width)
    model = ex.prepare(net, env, args.compile)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr)
    norm = Normalize(MEAN, STD).to(env.device)
    trainer = ex.Trainer(opt, args.limit, env.main)

    def step(batch: dict[str, Any]) -> tuple[torch.Tensor, int]:
        x = norm(batch["image"].to(env.device, non_blocking=True))
        with ex.autocast(env.device):
            out = model(x)
        return loss_of(out.float(), batch, classes), len(x)

    for epoch in trainer.epochs(args.epochs):
        augmented.set_epoch(epoch)  # the workers' transforms draw from it
        loader.sampler.set_epoch(epoch)
        stats = trainer.epoch(loader, step)
        found = recall(model, val_loader, norm, env, classes)
        ex.report(env, epoch, stats, f", val recall@10 {found:.3f}")
    ex.teardown()
    return trainer.losses


if __name__ == "__main__":
    main()
