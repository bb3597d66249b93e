"""The whole-batch crop: every sample's box resized to one size by one `grid_sample` over the
(padded) batch, its flip and colour jitter folded in, on whatever device the batch is on. It is
what CUDA runs; on the CPU, loaders.augment.kernel's per-sample pass gives the same pixels
within one level (tests/test_device_parity.py).

Only torch here: loaders.datasets calls it too, on what decode="cuda" decoded."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# A colour jitter: each sample's matrix (B, C, C), its offset's weight shift (B,) and the grey
# weights (C,): pixel -> matrix @ pixel + shift * (grey . mean pixel) (loaders.augment.color).
Color = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

MAX_SAMPLES = 4  # sub-samples a side per output pixel when shrinking, as roi_align's cap


def samples_for(boxes: torch.Tensor, size: tuple[int, int]) -> int:
    """roi_align's adaptive sampling ratio for a batch: ceil(box / output), the largest of the
    batch, at most MAX_SAMPLES; 1 where no box shrinks (plain bilinear).

    >>> samples_for(torch.tensor([[0, 0, 64, 64], [0, 0, 100, 30]]), (32, 32))
    4
    """
    ratio = max((boxes[:, 2] / size[0]).max().item(), (boxes[:, 3] / size[1]).max().item())
    return int(min(MAX_SAMPLES, max(1, -(-ratio // 1))))


def _coords(
    start: torch.Tensor, length: torch.Tensor, out: int, limit: torch.Tensor
) -> torch.Tensor:
    """Source pixel coordinates (B, out) of the centres of `out` pixels over [start, start +
    length), clamped to [0, limit - 1]: each image's own border, not the padding's."""
    j = torch.arange(out, device=start.device, dtype=torch.float64) + 0.5
    at = start[:, None] + j[None, :] * (length[:, None] / out) - 0.5
    return torch.minimum(at.clamp_min(0), (limit - 1)[:, None])


def _jitter(f: torch.Tensor, color: Color, uint8: bool) -> torch.Tensor:
    """f (B, C, H, W) float, each sample's colour applied; uint8: the offset carries +0.5 and the
    result is clipped to [0.5, 255.5], so that truncation rounds."""
    B, C, H, W = f.shape
    pixels = f.reshape(B, C, H * W)
    matrix, shift, grey = (t.to(f.device, f.dtype) for t in color)
    offset = (shift * (pixels.mean(2) @ grey))[:, None, None] + (0.5 if uint8 else 0.0)
    out = torch.baddbmm(offset, matrix, pixels)
    return (out.clamp_(0.5, 255.5) if uint8 else out).view(B, C, H, W)


def crop_batch(
    x: torch.Tensor,
    boxes: torch.Tensor | None,
    size: tuple[int, int],
    *,
    flip: torch.Tensor | None = None,
    color: Color | None = None,
    hw: torch.Tensor | None = None,
    samples: int = 1,
    rounded: bool = True,
) -> torch.Tensor:
    """Each sample's box (top, left, height, width) of `boxes` (B, 4) of x (B, C, H, W) resized
    to `size` (bilinear, align_corners=False, border padding), mirrored where `flip` (B,), then
    jittered by `color`; boxes None: x as it is (colour only). `hw` (B, 2): each image's own
    size in the top-left of a padded batch (None: all H x W). `samples` > 1 averages that many
    bilinear samples a side per pixel (roi_align's sampling ratio: shrinking without aliasing).
    uint8 in: uint8 out, rounded (rounded=False: float32); floats keep their dtype."""
    f = x if x.is_floating_point() else x.to(torch.float32)
    if boxes is not None:
        B, _, H, W = x.shape
        hw = torch.tensor([[H, W]], device=x.device).expand(B, 2) if hw is None else hw
        top, left, h, w = boxes.to(x.device, torch.float64).unbind(1)
        limits = hw.to(x.device, torch.float64).unbind(1)
        oh, ow = size[0] * samples, size[1] * samples
        rows = _coords(top, h, oh, limits[0])
        cols = _coords(left, w, ow, limits[1])
        if flip is not None:  # read backwards: the values a flip of the result would hold
            cols = torch.where(flip.to(x.device)[:, None], cols.flip(1), cols)
        # grid_sample's coordinates (align_corners=False): -1 and 1 are the outer pixel edges.
        grid = torch.empty((B, oh, ow, 2), dtype=f.dtype, device=x.device)
        grid[..., 0] = ((2 * cols + 1) / W - 1)[:, None, :].to(f.dtype)
        grid[..., 1] = ((2 * rows + 1) / H - 1)[:, :, None].to(f.dtype)
        f = F.grid_sample(f, grid, mode="bilinear", padding_mode="border", align_corners=False)
        if samples > 1:
            f = F.avg_pool2d(f, samples)
    uint8 = x.dtype == torch.uint8
    if color is not None:
        f = _jitter(f, color, uint8 and rounded)  # uint8: clipped, +0.5 in, truncation rounds
    elif uint8 and rounded:
        f = f.add_(0.5)  # a new tensor (x was uint8); bilinear samples of pixels lie in 0..255
    return f.to(torch.uint8) if uint8 and rounded else f
