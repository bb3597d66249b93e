"""Normalisation on the device that trains: uint8 travels, floats are made where they are used."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


class Normalize(nn.Module):
    """(x - mean) / std of a batch or an image as float; `mean`, `std` in pixel units (0-255).

    Examples:
        >>> import torch
        >>> from loaders import ImageShardDataset, Normalize
        >>> norm = Normalize(mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        ...                  std=[0.229 * 255, 0.224 * 255, 0.225 * 255])
        >>> norm(torch.zeros(2, 3, 8, 8, dtype=torch.uint8)).dtype
        torch.float32
        >>> norm = Normalize.from_dataset(ImageShardDataset("data/demo-packed", size=128))
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

    @classmethod
    def from_dataset(
        cls,
        ds: Any,
        size: int | None = None,
        dtype: torch.dtype = torch.float32,
        field: str | None = None,
    ) -> Normalize:
        """The per-channel mean and std prep stored for `ds`'s train split at `size`."""
        if isinstance(getattr(ds, "datasets", None), list) and hasattr(ds, "weights"):
            # A mixture's E[x] and E[x^2] are the weighted sums of its parts'.
            parts = [cls.from_dataset(d, size, field=field) for d in ds.datasets]
            w = torch.as_tensor(ds.weights, dtype=torch.float64).view(-1, 1, 1, 1)
            means = torch.stack([p.mean.double() for p in parts])
            mean = (w * means).sum(0)
            second = (w * (torch.stack([p.std.double() for p in parts]) ** 2 + means**2)).sum(0)
            sd = (second - mean**2).clamp(min=0).sqrt().flatten()
            return cls(mean.flatten().tolist(), (sd + (sd == 0)).tolist(), dtype)
        from loaders.fields import Image

        declared = getattr(ds, "declared", None)
        images = [n for n, f in (declared or {}).items() if isinstance(f, Image)]
        if not images:
            raise ValueError(
                f"prep stores pixel statistics with a dataset's image fields, and {ds!r:.80} has "
                "none. HINT: pass Normalize(mean=..., std=...)"
            )
        read = [n for n in getattr(ds, "fields", ()) if n in images]
        name = field if field is not None else (read or images)[0]
        if name not in images:
            said = f"{ds.store.root} has no image field {field!r}"
            raise ValueError(f"{said}; its image fields: {images}")
        root, stats = ds.store.root, ds.store.manifest.extra.get("stats")
        stats = stats.get(name) if isinstance(stats, dict) else None
        size = size if size is not None else getattr(ds, "size", None)
        sizes = stats.get("sizes") if isinstance(stats, dict) else None
        if not isinstance(sizes, dict) or not sizes:
            raise ValueError(
                f"{root} has no pixel statistics (packed before prep stored them). HINT: "
                "repack it with this prep, or pass Normalize(mean=..., std=...)"
            )
        at = sizes.get(str(size))
        if at is None:
            raise ValueError(f"{root} has pixel statistics at {list(sizes)} px, not {size}")
        std = [s or 1.0 for s in at["std"]]  # a constant channel: only centred
        return cls(at["mean"], std, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channels = self.mean.shape[0]
        if x.dim() not in (3, 4) or (channels != 1 and x.shape[-3] != channels):
            raise ValueError(f"expected (B, C, H, W) or (C, H, W) images, got {tuple(x.shape)}")
        mean, std = self.mean.to(x.device), self.std.to(x.device)
        # One new tensor, worked in place (copy=True: a float input is never changed).
        return x.to(self.dtype, copy=True).sub_(mean).div_(std)

    def extra_repr(self) -> str:
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"
