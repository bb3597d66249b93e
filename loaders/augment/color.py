"""ColorJitter: per-sample brightness, contrast and saturation, as one colour matrix a sample."""

from __future__ import annotations

import torch

from loaders.augment.base import Op, Sample, working

# ITU-R 601-2 luma, as torchvision's rgb_to_grayscale and prep's --gray.
LUMA = (0.299, 0.587, 0.114)


class ColorJitter(Op):
    """Each sample's brightness, contrast and saturation scaled by its own factors b, c, s,
    drawn uniformly in [1 - amount, 1 + amount] (never below 0), applied in that order:

    - brightness x -> b x;  contrast: a blend with the image's mean luma m;  saturation: a blend
      with the pixel's luma (a no-op on one channel): torchvision's adjust_* formulas.
    - The three are linear, so a sample's jitter is one 3x3 matrix and an offset,
      y = c b S x + (1 - c) b m with S = s I + (1 - s) 1 luma^T: one batched matmul for the
      whole batch (NVIDIA DALI's color_twist does the same). Unlike torchvision, which clips to
      0..255 after each step, uint8 images are clipped once, at the end, and return as uint8;
      float images are not clipped (put ColorJitter before Normalize, in pixel units).
    - No hue: torchvision's hue is an HSV round trip, not a matrix; it is left out rather than
      made slow or different.
    """

    def __init__(self, brightness: float = 0.0, contrast: float = 0.0, saturation: float = 0.0):
        super().__init__()
        if min(brightness, contrast, saturation) < 0:
            raise ValueError("brightness, contrast and saturation amounts must be >= 0")
        self.amounts = (brightness, contrast, saturation)

    def matrices(self, u: torch.Tensor, means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each sample's matrix (B, C, C) and offset (B, 1, C) from its draws u (B, 3) and its
        per-channel mean pixel values (B, C)."""
        amounts = torch.tensor(self.amounts, dtype=u.dtype, device=u.device)
        b, c, s = (1 + amounts * (2 * u - 1)).clamp_min(0).unbind(1)
        channels = means.shape[1]
        eye = torch.eye(channels, dtype=u.dtype, device=u.device)
        if channels == 3:
            luma = torch.tensor(LUMA, dtype=u.dtype, device=u.device)
            sat = s[:, None, None] * eye + (1 - s)[:, None, None] * luma.expand(3, 3)
            gray_mean = means.to(u.dtype) @ luma
        else:
            sat, gray_mean = eye.expand(len(u), channels, channels), means[:, 0].to(u.dtype)
        matrix = (c * b)[:, None, None] * sat
        offset = ((1 - c) * b * gray_mean)[:, None, None].expand(-1, 1, channels)
        return matrix, offset

    def augment(self, sample: Sample, key: int) -> Sample:
        x = sample.images
        if not any(self.amounts):
            return sample
        B, C, H, W = x.shape
        # (B, C, H * W) is a view for contiguous and channels-last batches alike.
        pixels = working(x.reshape(B, C, H * W))
        means = pixels.mean(2) if self.amounts[1] else pixels.new_zeros(B, C)
        matrix, offset = self.matrices(self.draws(key, sample, 3), means)
        dt, uint8 = pixels.dtype, x.dtype == torch.uint8
        # uint8: +0.5 in the offset and a clip to [0.5, 255.5], so truncation rounds (one pass).
        offset = offset.transpose(1, 2).to(dt) + (0.5 if uint8 else 0.0)
        out = torch.baddbmm(offset, matrix.to(dt), pixels)
        out = out.clamp_(0.5, 255.5).to(torch.uint8) if uint8 else out.to(x.dtype)
        return sample.but(images=out.view(B, C, H, W))

    def extra_repr(self) -> str:
        b, c, s = self.amounts
        return f"brightness={b}, contrast={c}, saturation={s}"
