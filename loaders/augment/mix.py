"""MixUp and CutMix with a λ per sample, returning soft labels (B, num_classes). Sample i is
mixed with sample i - 1 of the batch (rolled by one, as torchvision does); masks pass unmixed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from loaders.augment.base import Op, Sample, to_images, working
from loaders.augment.random import BETA_DRAWS, beta


class _Mix(Op):
    shown = ("alpha", "num_classes")

    def __init__(self, alpha: float, num_classes: int):
        super().__init__()
        if alpha <= 0 or num_classes < 1:
            raise ValueError(f"alpha {alpha} must be > 0 and num_classes {num_classes} >= 1")
        self.alpha, self.num_classes = alpha, num_classes

    def soft_labels(self, labels: torch.Tensor | None, keep: torch.Tensor) -> torch.Tensor:
        """keep * labels + (1 - keep) * the partner's labels: float32 (B, num_classes)."""
        if labels is None:
            raise ValueError(f"{type(self).__name__} needs the labels: aug(images, labels, ...)")
        if labels.dim() == 1:
            labels = F.one_hot(labels.to(torch.int64), self.num_classes)
        labels = labels.to(torch.float32)
        keep = keep.to(torch.float32)[:, None]
        return torch.lerp(labels.roll(1, 0), labels, keep)

    def refuse_boxes(self, sample: Sample) -> None:
        if sample.targets is not None:
            raise ValueError(
                f"{type(self).__name__} blends two samples' pixels; their boxes would need "
                "merging, which it does not do. HINT: leave it out of a pipeline given boxes="
            )


class MixUp(_Mix):
    """images λ x_i + (1 - λ) x_(i-1), labels the same, λ ~ Beta(alpha, alpha) per sample."""

    def augment(self, sample: Sample, key: int) -> Sample:
        self.refuse_boxes(sample)
        x, f = sample.images, working(sample.images)
        lam = beta(self.alpha, self.draws(key, sample, BETA_DRAWS + 2)[:, :BETA_DRAWS])
        images = to_images(torch.lerp(f.roll(1, 0), f, lam.to(f.dtype).view(-1, 1, 1, 1)), x)
        return sample.but(images=images, labels=self.soft_labels(sample.labels, lam))


class CutMix(_Mix):
    """A box of the partner's image pasted in: area (1 - λ), λ ~ Beta(alpha, alpha), centre
    uniform, clipped at the edges; the labels weigh the pixels actually kept."""

    def boxes(self, key: int, sample: Sample) -> torch.Tensor:
        """int64 (B, 4): top, left, bottom, right (exclusive) of each sample's pasted box."""
        H, W = sample.images.shape[-2:]
        u = self.draws(key, sample, BETA_DRAWS + 2)
        cut = torch.sqrt(1.0 - beta(self.alpha, u[:, :BETA_DRAWS]))
        ch, cw = (H * cut).floor(), (W * cut).floor()
        cy, cx = (u[:, BETA_DRAWS] * H).floor(), (u[:, BETA_DRAWS + 1] * W).floor()
        top, bottom = (cy - (ch / 2).floor()).clamp(0, H), (cy + (ch / 2).floor()).clamp(0, H)
        left, right = (cx - (cw / 2).floor()).clamp(0, W), (cx + (cw / 2).floor()).clamp(0, W)
        return torch.stack([top, left, bottom, right], 1).to(torch.int64)

    def augment(self, sample: Sample, key: int) -> Sample:
        self.refuse_boxes(sample)
        x = sample.images
        H, W = x.shape[-2:]
        top, left, bottom, right = self.boxes(key, sample).unbind(1)
        rows = torch.arange(H, device=x.device)
        cols = torch.arange(W, device=x.device)
        in_rows = (rows >= top[:, None]) & (rows < bottom[:, None])
        in_cols = (cols >= left[:, None]) & (cols < right[:, None])
        pasted = in_rows[:, None, :, None] & in_cols[:, None, None, :]
        images = torch.where(pasted, x.roll(1, 0), x)
        keep = 1.0 - ((bottom - top) * (right - left)).to(torch.float64) / (H * W)
        return sample.but(images=images, labels=self.soft_labels(sample.labels, keep))
