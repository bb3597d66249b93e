"""Making a pending crop: each sample's box resized (and mirrored), in one pass for the whole
batch: loaders.augment.kernel's for a uint8 CPU batch, one grid_sample otherwise."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from loaders.augment import kernel
from loaders.augment.batch import Resize, Sample, empty, to_images, working


def take(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """x[b, rows[b, i], cols[b, j]] for x (B, H, W, ...): (B, len(rows), len(cols), ...)."""
    b = torch.arange(x.shape[0], device=x.device).view(-1, 1, 1)
    return x[b, rows[:, :, None], cols[:, None, :]]


def _centres(start: torch.Tensor, length: torch.Tensor, out: int) -> torch.Tensor:
    """Source coordinates (B, out) of the centres of `out` pixels over [start, start + length)."""
    j = torch.arange(out, device=start.device, dtype=torch.float64) + 0.5
    return start[:, None] + j[None, :] * (length[:, None] / out)


def resized_crop(
    sample: Sample,
    boxes: torch.Tensor,
    size: tuple[int, int],
    flip: torch.Tensor | None = None,
    *,
    rounded: bool = True,
    color: kernel.Color | None = None,
) -> Sample:
    """Each sample's box (top, left, height, width) resized to `size`, mirrored where `flip`
    (bool (B,)): bilinear for images, nearest for the mask (one gather). A uint8 batch on the
    CPU takes loaders.augment.kernel's pass, with the colour jitter `color` folded in; the
    rest one `grid_sample` of the whole batch. rounded=False leaves a uint8 batch's result in
    float32 for the torch path (ColorJitter rounds it once, at its end)."""
    top, left, h, w = boxes.to(torch.float64).unbind(1)
    x = sample.images
    H, W = x.shape[-2:]
    rows, cols = _centres(top, h, size[0]), _centres(left, w, size[1])
    cols = cols if flip is None else torch.where(flip[:, None], cols.flip(1), cols)
    r, c = (t.floor().to(torch.int64).clamp(0, n - 1) for t, n in ((rows, H), (cols, W)))
    masks = sample.masks(lambda m, _: take(m, r, c))
    if kernel.fits(x) and (rounded or color is not None):
        images = kernel.resample(x, rows - 0.5, cols - 0.5, color)
        return sample.but(images=images, pending=None, **masks)
    if color is not None:
        raise ValueError("a colour folded into the crop needs a uint8 CPU batch (kernel.fits)")
    f = working(x)
    # grid_sample's coordinates (align_corners=False: -1 and 1 are the image's outer edges) of
    # output pixel centres over [0, 1): each sample's box scales and shifts them, and a flip
    # reads them backwards (the very values a flip of the result would put there).
    ys, xs = (_unit(n, x.device, f.dtype) for n in size)
    gcols = (
        xs.expand(len(boxes), -1) if flip is None else torch.where(flip[:, None], xs.flip(0), xs)
    )
    gx = torch.addcmul(
        (2 * left / W - 1)[:, None].to(f.dtype), (2 * w / W)[:, None].to(f.dtype), gcols
    )
    gy = torch.addcmul((2 * top / H - 1)[:, None].to(f.dtype), (2 * h / H)[:, None].to(f.dtype), ys)
    grid = empty((len(boxes), *size, 2), f.dtype, x.device)
    grid[..., 0], grid[..., 1] = gx[:, None, :], gy[:, :, None]  # (B, h, w, 2): x, y
    out = F.grid_sample(f, grid, mode="bilinear", padding_mode="border", align_corners=False)
    images = to_images(out, x) if rounded else out
    return sample.but(images=images, pending=None, **masks)


def settle(sample: Sample, rounded: bool = True, color: kernel.Color | None = None) -> Sample:
    """The sample with its pending crop (if any) made; with `color`, a jitter made in the same
    pass (the whole image, at its size, when no crop is pending)."""
    p = sample.pending
    if p is None and color is None:
        return sample
    if p is None:
        H, W = sample.images.shape[-2:]
        whole = torch.tensor([[0, 0, H, W]], device=sample.images.device)
        p = Resize(whole.expand(len(sample.index), 4), (H, W))
    return resized_crop(sample, p.boxes, p.size, p.flip, rounded=rounded, color=color)


def _unit(n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The centres of n pixels over [0, 1)."""
    return (torch.arange(n, device=device, dtype=dtype) + 0.5) / n
