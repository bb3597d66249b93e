"""MixUp and CutMix, a λ per sample, sample i with sample i - 1: soft labels (B, num_classes)."""

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

    def mix(self, sample: Sample, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The mixed images, and the share (B,) of each sample's own that they keep."""
        raise NotImplementedError

    def augment(self, sample: Sample, key: int) -> Sample:
        """The mixed images, with labels keep * labels + (1 - keep) * the partner's, float32."""
        name, labels = type(self).__name__, sample.labels
        if sample.targets is not None:
            raise ValueError(
                f"{name} blends two samples' pixels; their boxes would need merging, which it "
                "does not do. HINT: leave it out of a pipeline given boxes="
            )
        images, keep = self.mix(sample, key)
        if labels is None:
            raise ValueError(f"{name} needs the labels: aug(images, labels, ...)")
        if labels.dim() == 1:
            labels = F.one_hot(labels.to(torch.int64), self.num_classes)
        labels = labels.to(torch.float32)
        mixed = torch.lerp(labels.roll(1, 0), labels, keep.to(torch.float32)[:, None])
        return sample.but(images=images, labels=mixed)


class MixUp(_Mix):
    """images λ x_i + (1 - λ) x_(i-1), labels the same, λ ~ Beta(alpha, alpha) per sample.

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> labels = torch.tensor([0, 1, 2, 3])
        >>> aug = T.Compose([T.MixUp(alpha=0.2, num_classes=4)], seed=0)
        >>> x, y = aug(images, labels, index=index)
        >>> y.shape, bool(torch.allclose(y.sum(1), torch.ones(4)))  # soft labels summing to 1
        (torch.Size([4, 4]), True)
    """

    def mix(self, sample: Sample, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, f = sample.images, working(sample.images)
        lam = beta(self.alpha, self.draws(key, sample, BETA_DRAWS + 2)[:, :BETA_DRAWS])
        return to_images(torch.lerp(f.roll(1, 0), f, lam.to(f.dtype).view(-1, 1, 1, 1)), x), lam


class CutMix(_Mix):
    """A box of area (1 - λ) of the partner's image pasted in; the labels weigh the pixels kept.

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> labels = torch.tensor([0, 1, 2, 3])
        >>> aug = T.Compose([T.CutMix(alpha=1.0, num_classes=4)], seed=0)
        >>> x, y = aug(images, labels, index=index)
        >>> y.shape, bool(torch.allclose(y.sum(1), torch.ones(4)))  # soft labels summing to 1
        (torch.Size([4, 4]), True)
    """

    def mix(self, sample: Sample, key: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = sample.images
        H, W = x.shape[-2:]
        u = self.draws(key, sample, BETA_DRAWS + 2)
        cut = torch.sqrt(1.0 - beta(self.alpha, u[:, :BETA_DRAWS]))
        ch, cw = (H * cut).floor(), (W * cut).floor()
        cy, cx = (u[:, BETA_DRAWS] * H).floor(), (u[:, BETA_DRAWS + 1] * W).floor()
        top, bottom = (cy - (ch / 2).floor()).clamp(0, H), (cy + (ch / 2).floor()).clamp(0, H)
        left, right = (cx - (cw / 2).floor()).clamp(0, W), (cx + (cw / 2).floor()).clamp(0, W)
        top, left, bottom, right = (t.to(torch.int64) for t in (top, left, bottom, right))
        rows, cols = torch.arange(H, device=x.device), torch.arange(W, device=x.device)
        in_rows = (rows >= top[:, None]) & (rows < bottom[:, None])
        in_cols = (cols >= left[:, None]) & (cols < right[:, None])
        pasted = in_rows[:, None, :, None] & in_cols[:, None, None, :]
        keep = 1.0 - ((bottom - top) * (right - left)).to(torch.float64) / (H * W)
        return torch.where(pasted, x.roll(1, 0), x), keep
