"""Normalisation on the device that trains: uint8 travels, floats are made where they are used."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class Normalize(nn.Module):
    """(x - mean) / std for a uint8 batch (B, C, H, W) or image (C, H, W), as float.

    `mean` and `std` are in the units of the stored pixels (0-255), one value per channel or one
    for all, as in `Normalize([0.221 * 255], [0.242 * 255])`. Move the module to the GPU with the
    batch (`.to(device)`) so the conversion runs there; channels-last input stays channels-last.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self, mean: Sequence[float], std: Sequence[float], dtype: torch.dtype = torch.float32
    ):
        super().__init__()
        if len(mean) != len(std):
            raise ValueError(f"mean has {len(mean)} values, std {len(std)}")
        if any(s <= 0 for s in std):
            raise ValueError(f"std must be positive, got {list(std)}")
        self.dtype = dtype
        self.register_buffer("mean", torch.tensor(mean, dtype=dtype).view(-1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=dtype).view(-1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channels = self.mean.shape[0]
        if x.dim() not in (3, 4) or (channels != 1 and x.shape[-3] != channels):
            raise ValueError(f"expected (B, C, H, W) or (C, H, W) images, got {tuple(x.shape)}")
        mean, std = self.mean.to(x.device), self.std.to(x.device)
        return (x.to(self.dtype) - mean) / std

    def extra_repr(self) -> str:
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"
