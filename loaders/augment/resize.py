"""The batch ops with no draws: Resize (the whole image, bilinear) and CenterCrop (torchvision's
rounding, padded where the crop is larger than the image), moving masks, boxes and keypoints."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from loaders.augment.base import Op
from loaders.augment.batch import Resize as Pending
from loaders.augment.batch import Sample
from loaders.augment.geometry import _pair, crop


class Resize(Op):
    """Every image resized to `size`: (h, w), or an int for the shorter side (the longer one
    keeps the aspect ratio, truncated, as torchvision's Resize(int)). Bilinear without
    antialiasing, as RandomResizedCrop; masks by nearest. A flip right after it is folded in."""

    def __init__(self, size: int | Sequence[int]):
        super().__init__()
        self.size: int | tuple[int, int] = size if isinstance(size, int) else _pair(size)
        if isinstance(size, int) and size < 1:
            raise ValueError(f"size {size} must be positive")

    def output(self, height: int, width: int) -> tuple[int, int]:
        """(h, w) of an image of height x width once resized.

        >>> Resize(100).output(300, 450), Resize((32, 48)).output(300, 450)
        ((100, 150), (32, 48))
        """
        if not isinstance(self.size, int):
            return self.size
        short, long = sorted((height, width))
        side = int(self.size * long / short)
        return (self.size, side) if height <= width else (side, self.size)

    def augment(self, sample: Sample, key: int) -> Sample:
        B, _, H, W = sample.images.shape
        out = self.output(int(H), int(W))
        whole = torch.tensor([[0, 0, H, W]], device=sample.images.device).expand(B, 4)
        t = sample.targets
        t = None if t is None else t.moved(0.0, 0.0, out[0] / H, out[1] / W, out)
        return sample.but(pending=Pending(whole, out), targets=t)

    def extra_repr(self) -> str:
        return f"size={self.size}"


class CenterCrop(Op):
    """The centred `size` crop of every image (top = round((H - h) / 2), as torchvision's);
    a crop larger than the image pads it evenly (the odd pixel after) with `fill`, and the
    mask with `mask_fill`. loaders.CenterCrop takes the same crop when a dataset reads it."""

    def __init__(self, size: int | Sequence[int], fill: float = 0, mask_fill: int = 0):
        super().__init__()
        self.size, self.fill, self.mask_fill = _pair(size), fill, mask_fill

    def augment(self, sample: Sample, key: int) -> Sample:
        B, _, H, W = sample.images.shape
        top, left = (
            -((n - side) // 2) if n > side else round((side - n) / 2.0)
            for n, side in zip(self.size, (int(H), int(W)), strict=True)
        )
        device = sample.images.device
        tops, lefts = (torch.full((B,), v, dtype=torch.int64, device=device) for v in (top, left))
        return crop(sample, tops, lefts, self.size, self.fill, self.mask_fill)

    def extra_repr(self) -> str:
        return f"size={self.size}"
