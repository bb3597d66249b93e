"""ColorJitter: per-sample brightness, contrast, saturation and hue as one matrix a sample."""

from __future__ import annotations

import math

import torch

from loaders.augment.base import Op, Sample, settle
from loaders.augment.batchcrop import Color

# ITU-R 601-2 luma, as torchvision's rgb_to_grayscale and prep's --gray.
LUMA = (0.299, 0.587, 0.114)
# RGB to YIQ (NTSC): luma, then two chroma axes whose rows sum to 0 (grey has no chroma).
YIQ = (LUMA, (0.596, -0.274, -0.322), (0.211, -0.523, 0.312))


def hue_rotations(turns: torch.Tensor) -> torch.Tensor:
    """(B, 3, 3) RGB matrices that turn each pixel's chroma by `turns` (B,) in YIQ space."""
    yiq = torch.tensor(YIQ, dtype=turns.dtype, device=turns.device)
    cos, sin = torch.cos(2 * math.pi * turns), torch.sin(2 * math.pi * turns)
    one, zero = torch.ones_like(cos), torch.zeros_like(cos)
    rows = [[one, zero, zero], [zero, cos, -sin], [zero, sin, cos]]
    rotation = torch.stack([torch.stack(row, -1) for row in rows], -2)
    return torch.linalg.inv(yiq) @ rotation @ yiq


class ColorJitter(Op):
    """Brightness, contrast, saturation and hue in one matrix a sample: y = c b H S x + (1 - c)
    b m (m the mean luma, S = s I + (1 - s) 1 luma^T), as DALI's color_twist.

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> aug = T.Compose([T.ColorJitter(brightness=0.2, contrast=0.2, saturation=0.2, hue=0.05)])
        >>> aug(images, index=index).dtype  # uint8 in, uint8 out
        torch.uint8
    """

    lazy = True
    shown = ("brightness", "contrast", "saturation", "hue")

    def __init__(
        self,
        brightness: float = 0.0,
        contrast: float = 0.0,
        saturation: float = 0.0,
        hue: float = 0.0,
    ):
        super().__init__()
        if min(brightness, contrast, saturation) < 0 or not 0 <= hue <= 0.5:
            raise ValueError("brightness, contrast and saturation must be >= 0, hue in [0, 0.5]")
        self.amounts = (brightness, contrast, saturation)
        self.brightness, self.contrast, self.saturation = self.amounts  # for repr()
        self.hue = hue

    def matrices(self, u: torch.Tensor, channels: int) -> Color:
        """The jitter (kernel.Color) of each sample from its draws u (B, 4)."""
        amounts = torch.tensor(self.amounts, dtype=u.dtype, device=u.device)
        b, c, s = (1 + amounts * (2 * u[:, :3] - 1)).clamp_min(0).unbind(1)
        eye = torch.eye(channels, dtype=u.dtype, device=u.device)
        if channels == 3:
            grey = torch.tensor(LUMA, dtype=u.dtype, device=u.device)
            sat = s[:, None, None] * eye + (1 - s)[:, None, None] * grey.expand(3, 3)
            if self.hue:
                sat = hue_rotations(self.hue * (2 * u[:, 3] - 1)) @ sat
        else:
            sat, grey = eye.expand(len(u), channels, channels), eye[0]
        return (c * b)[:, None, None] * sat, (1 - c) * b, grey

    def augment(self, sample: Sample, key: int) -> Sample:
        if not (any(self.amounts) or self.hue):
            return sample
        color = self.matrices(self.draws(key, sample, 4), sample.images.shape[1])
        return settle(sample, color=color)  # folded into a pending crop: one pass
