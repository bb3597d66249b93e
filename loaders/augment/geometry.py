"""Geometric batch ops; RandomResizedCrop and Resize only draw their boxes (Sample.pending)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from loaders.augment.base import Op, Sample, take
from loaders.augment.base import Resize as Pending
from loaders.augment.random import stream_key, uniform

TRIES = 10  # as torchvision's RandomResizedCrop: boxes drawn until one fits, then the centre


def pair(size: int | Sequence[int], what: str = "size") -> tuple[int, int]:
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    if h < 1 or w < 1:
        raise ValueError(f"{what} {size} must be positive")
    return int(h), int(w)


class RandomResizedCrop(Op):
    """torchvision's RandomResizedCrop drawn per sample; `boxes()` is the generator alone.

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> T.RandomResizedCrop(24, scale=(0.35, 1.0))(images, index=index).shape
        torch.Size([4, 3, 24, 24])
    """

    shown = ("size", "scale", "ratio")

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ):
        super().__init__()
        if not (0 < scale[0] <= scale[1] and 0 < ratio[0] <= ratio[1]):
            raise ValueError(f"scale {scale} and ratio {ratio} must be increasing and positive")
        self.size, self.scale, self.ratio = pair(size), scale, ratio

    def boxes(
        self,
        index: torch.Tensor,
        height: int | torch.Tensor,
        width: int | torch.Tensor,
        *,
        seed: int = 0,
        epoch: int = 0,
        name: str = "RandomResizedCrop",
    ) -> torch.Tensor:
        """int64 (N, 4) boxes (top, left, height, width) in images of `height` x `width` px."""
        u = uniform(stream_key(seed, epoch, name), index, 2 * TRIES + 2)
        return self._boxes(u, height, width)

    def _boxes(
        self, u: torch.Tensor, height: int | torch.Tensor, width: int | torch.Tensor
    ) -> torch.Tensor:
        H, W = (
            torch.as_tensor(side, dtype=torch.float64, device=u.device).reshape(-1, 1)
            for side in (height, width)
        )
        area = H * W * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[:, :TRIES])
        lo, hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = torch.exp(lo + (hi - lo) * u[:, TRIES : 2 * TRIES])
        w, h = torch.sqrt(area * aspect).round(), torch.sqrt(area / aspect).round()
        fits = (w > 0) & (h > 0) & (w <= W) & (h <= H)
        first = fits.to(torch.int8).argmax(1, keepdim=True)
        # None fits: the whole image, cut to the nearest allowed ratio (torchvision's fallback).
        image_ratio = W / H
        fw = torch.where(image_ratio > self.ratio[1], (H * self.ratio[1]).round(), W)
        fh = torch.where(image_ratio < self.ratio[0], (W / self.ratio[0]).round(), H)
        found = fits.any(1, keepdim=True)
        w = torch.where(found, w.gather(1, first), fw)
        h = torch.where(found, h.gather(1, first), fh)
        centre = torch.full_like(u[:, :2], 0.5)
        pos = torch.where(found, u[:, 2 * TRIES :], centre)
        top = torch.where(found, (pos[:, :1] * (H - h + 1)).floor(), ((H - h) / 2).floor())
        left = torch.where(found, (pos[:, 1:] * (W - w + 1)).floor(), ((W - w) / 2).floor())
        return torch.cat([top, left, h, w], 1).to(torch.int64)

    def augment(self, sample: Sample, key: int) -> Sample:
        H, W = sample.images.shape[-2:]
        boxes = self._boxes(self.draws(key, sample, 2 * TRIES + 2), H, W)
        t = sample.targets
        if t is not None:
            top, left, h, w = boxes.to(torch.float64).unbind(1)
            t = t.moved(top, left, self.size[0] / h, self.size[1] / w, self.size)
        return sample.but(pending=Pending(boxes, self.size), targets=t)


class Resize(Op):
    """Every image resized to `size`: (h, w), or an int for the shorter side (as torchvision).

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> T.Resize((16, 24))(images, index=index).shape
        torch.Size([4, 3, 16, 24])
    """

    shown = ("size",)

    def __init__(self, size: int | Sequence[int]):
        super().__init__()
        checked = pair(size)  # refuses a size below 1
        self.size: int | tuple[int, int] = size if isinstance(size, int) else checked

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


class RandomCrop(Op):
    """A `size` crop at a random place of the image padded by `padding` px (`fill`).

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> T.RandomCrop(32, padding=4)(images, index=index).shape
        torch.Size([4, 3, 32, 32])
    """

    shown = ("size", "padding")

    def __init__(
        self, size: int | Sequence[int], padding: int = 0, fill: float = 0, mask_fill: int = 0
    ):
        super().__init__()
        if padding < 0:
            raise ValueError(f"padding {padding} must be non-negative")
        self.size, self.padding, self.fill, self.mask_fill = pair(size), padding, fill, mask_fill

    def augment(self, sample: Sample, key: int) -> Sample:
        H, W = sample.images.shape[-2:]
        (sh, sw), p = self.size, self.padding
        if sh > H + 2 * p or sw > W + 2 * p:
            raise ValueError(f"crop {self.size} is larger than the padded image {(H, W)} + {p}")
        u = self.draws(key, sample, 2)
        top = (u[:, 0] * (H + 2 * p - sh + 1)).floor().to(torch.int64) - p
        left = (u[:, 1] * (W + 2 * p - sw + 1)).floor().to(torch.int64) - p
        return crop(sample, top, left, self.size, self.fill, self.mask_fill)


class CenterCrop(Op):
    """The centred `size` crop of every image, as torchvision's (padded with `fill`).

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> T.CenterCrop(24)(images, index=index).shape
        torch.Size([4, 3, 24, 24])
    """

    shown = ("size",)

    def __init__(self, size: int | Sequence[int], fill: float = 0, mask_fill: int = 0):
        super().__init__()
        self.size, self.fill, self.mask_fill = pair(size), fill, mask_fill

    def augment(self, sample: Sample, key: int) -> Sample:
        B, _, H, W = sample.images.shape
        top, left = (
            -((n - side) // 2) if n > side else round((side - n) / 2.0)
            for n, side in zip(self.size, (int(H), int(W)), strict=True)
        )
        device = sample.images.device
        tops, lefts = (torch.full((B,), v, dtype=torch.int64, device=device) for v in (top, left))
        return crop(sample, tops, lefts, self.size, self.fill, self.mask_fill)


class _Flip(Op):
    """Each sample mirrored along `axis` (0: left-right) with probability p: one gather."""

    axis = 0
    shown = ("p",)

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"p {p} must be a probability")
        self.p = p

    def augment(self, sample: Sample, key: int) -> Sample:
        flip = self.draws(key, sample, 1)[:, 0] < self.p
        t = sample.targets
        t = None if t is None else t.flipped(flip, sample.canvas[1 - self.axis], self.axis)
        p = sample.pending  # only a lazy op is given one: the flip folds into its sampling
        if p is not None:
            turned = flip if p.flip is None else flip ^ p.flip
            return sample.but(pending=Pending(p.boxes, p.size, turned), targets=t)
        dim = 3 - self.axis  # of the images (B, C, H, W); the masks' is one less
        n = sample.images.shape[dim]
        i = torch.arange(n, device=sample.images.device)
        order = torch.where(flip[:, None], n - 1 - i, i)  # (B, n): each sample's source
        images = _along(sample.images, order, dim)
        masks = sample.masks(lambda m, _: _along(m, order, dim - 1))
        return sample.but(images=images, targets=t, **masks)


class RandomHorizontalFlip(_Flip):
    """Each sample mirrored left-right with probability p (folded into a pending crop).

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> flipped = T.RandomHorizontalFlip(1.0)(images, index=index)
        >>> torch.equal(flipped, images.flip(-1))
        True
    """

    lazy = True


class RandomVerticalFlip(_Flip):
    """Each sample mirrored top-bottom with probability p, after any pending crop is made.

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> flipped = T.RandomVerticalFlip(1.0)(images, index=index)
        >>> torch.equal(flipped, images.flip(-2))
        True
    """

    axis = 1


def crop(
    sample: Sample,
    top: torch.Tensor,
    left: torch.Tensor,
    size: tuple[int, int],
    fill: float = 0,
    mask_fill: int = 0,
) -> Sample:
    """Each sample's `size` crop at (top, left) (B,), `fill` outside the image: one gather."""
    H, W = sample.images.shape[-2:]
    (sh, sw), device = size, top.device
    rows = top[:, None] + torch.arange(sh, device=device)
    cols = left[:, None] + torch.arange(sw, device=device)
    inside = ((rows >= 0) & (rows < H))[:, :, None] & ((cols >= 0) & (cols < W))[:, None, :]
    r, c = rows.clamp(0, H - 1), cols.clamp(0, W - 1)

    def cut(m: torch.Tensor, fill: float) -> torch.Tensor:  # (B, H, W, ...): channels last
        where = inside.view(*inside.shape, *([1] * (m.dim() - 3)))
        return torch.where(where, take(m, r, c), torch.tensor(fill, dtype=m.dtype, device=m.device))

    images = cut(sample.images.permute(0, 2, 3, 1), fill).permute(0, 3, 1, 2)
    t = sample.targets
    t = None if t is None else t.moved(top, left, 1.0, 1.0, size)
    return sample.but(images=images, targets=t, **sample.masks(cut, mask_fill))


def _along(x: torch.Tensor, order: torch.Tensor, dim: int) -> torch.Tensor:
    """x (B, ...) with each sample's entries along `dim` taken in the order (B, n)."""
    shape = [1] * x.dim()
    shape[0], shape[dim] = len(order), order.shape[1]
    return x.gather(dim, order.view(shape).expand_as(x))
