"""The torch ops CUDA runs (the whole-batch crop, every transform, Normalize), run here on CPU
tensors: within one level of the CPU kernel, and reproducible by (seed, epoch, index)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from loaders import Normalize
from loaders import transforms as T
from loaders.augment import kernel
from loaders.augment.batchcrop import crop_batch

pytestmark = pytest.mark.skipif(
    not kernel.fits(torch.zeros(1, 3, 1, 1, dtype=torch.uint8)), reason="the CPU kernel needs numba"
)


def noisy(n: int, h: int = 37, w: int = 53, seed: int = 0) -> torch.Tensor:
    """uint8 (n, 3, h, w): smooth gradients plus noise (bilinear samples fall between levels)."""
    g = torch.Generator().manual_seed(seed)
    ramp = torch.linspace(0, 200, w).expand(n, 3, h, w)
    return (ramp + torch.randint(0, 56, (n, 3, h, w), generator=g)).to(torch.uint8)


def random_boxes(n: int, h: int, w: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    bh = torch.randint(1, h + 1, (n,), generator=g)
    bw = torch.randint(1, w + 1, (n,), generator=g)
    top = (torch.rand(n, generator=g) * (h - bh + 1)).floor().long()
    left = (torch.rand(n, generator=g) * (w - bw + 1)).floor().long()
    return torch.stack([top, left, bh, bw], 1)


def bilinear(img: np.ndarray, box: list[int], size: tuple[int, int]) -> np.ndarray:
    """One image (C, H, W) float64: its box resized by bilinear sampling at output pixel centres
    with edge clamping (grid_sample's align_corners=False, border padding), in plain numpy."""
    top, left, bh, bw = box
    _, H, W = img.shape
    ys = np.clip(top + (np.arange(size[0]) + 0.5) * bh / size[0] - 0.5, 0, H - 1)
    xs = np.clip(left + (np.arange(size[1]) + 0.5) * bw / size[1] - 0.5, 0, W - 1)
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, H - 1), np.minimum(x0 + 1, W - 1)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    a, b = img[:, y0][:, :, x0], img[:, y0][:, :, x1]
    c, d = img[:, y1][:, :, x0], img[:, y1][:, :, x1]
    return (a * (1 - fx) + b * fx) * (1 - fy) + (c * (1 - fx) + d * fx) * fy


def test_the_batch_crop_is_bilinear_per_box_also_in_a_padded_batch() -> None:
    x = noisy(6).double()
    boxes = random_boxes(6, 37, 53)
    flip = torch.tensor([False, True, False, True, True, False])
    got = crop_batch(x, boxes, (20, 30), flip=flip)
    for j in range(6):
        ref = bilinear(x[j].numpy(), boxes[j].tolist(), (20, 30))
        ref = ref[:, :, ::-1] if flip[j] else ref
        assert np.allclose(got[j].numpy(), ref, atol=1e-9)
    # Images of their own sizes padded into one batch: each reads its own border, not zeros.
    small = noisy(1, 20, 25, seed=3)[0].double()
    padded = torch.zeros(2, 3, 37, 53, dtype=torch.float64)
    padded[0], padded[1, :, :20, :25] = x[0], small
    hw = torch.tensor([[37, 53], [20, 25]])
    two = torch.tensor([[0, 0, 37, 53], [5, 0, 15, 25]])
    out = crop_batch(padded, two, (16, 32), hw=hw)
    assert np.allclose(out[1].numpy(), bilinear(small.numpy(), [5, 0, 15, 25], (16, 32)))
    assert np.allclose(out[0].numpy(), bilinear(x[0].numpy(), [0, 0, 37, 53], (16, 32)))
    # A box at its own size is its pixels, exactly (uint8 in, uint8 out).
    pixels = noisy(4)
    same = crop_batch(pixels, torch.tensor([[3, 5, 20, 30]] * 4), (20, 30))
    assert same.dtype == torch.uint8 and torch.equal(same, pixels[:, :, 3:23, 5:35])


@pytest.mark.parametrize("size", [(24, 40), (61, 17)])
def test_the_batch_crop_is_the_per_sample_kernel_within_one_level(size: tuple[int, int]) -> None:
    x, n = noisy(16), 16
    boxes = random_boxes(n, 37, 53)
    flip = torch.arange(n) % 3 == 0
    color = T.ColorJitter(0.4, 0.4, 0.4, hue=0.1).matrices(torch.rand(n, 4, dtype=torch.float64), 3)
    for jitter in (None, color):
        batch = crop_batch(x, boxes, size, flip=flip, color=jitter)
        # The kernel's sampling positions, computed here: pixel centres over each box.
        top, left, h, w = boxes.double().unbind(1)
        rows = top[:, None] + (torch.arange(size[0]) + 0.5) * (h[:, None] / size[0]) - 0.5
        cols = left[:, None] + (torch.arange(size[1]) + 0.5) * (w[:, None] / size[1]) - 0.5
        cols = torch.where(flip[:, None], cols.flip(1), cols)
        one_by_one = kernel.resample(x, rows, cols, jitter)
        assert batch.dtype == torch.uint8 and batch.shape == one_by_one.shape == (n, 3, *size)
        assert (batch.int() - one_by_one.int()).abs().max() <= 1
        assert (batch != one_by_one).float().mean() < 0.01  # rounding ties only


def ops() -> dict[str, nn.Module]:
    return {
        "RandomResizedCrop": T.RandomResizedCrop(24, scale=(0.3, 1.0)),
        "Resize": T.Resize(29),
        "RandomCrop": T.RandomCrop(30, padding=3),
        "CenterCrop": T.CenterCrop((20, 60)),
        "RandomHorizontalFlip": T.RandomHorizontalFlip(0.5),
        "RandomVerticalFlip": T.RandomVerticalFlip(0.5),
        "ColorJitter": T.ColorJitter(0.3, 0.3, 0.3, hue=0.05),
        "MixUp": T.MixUp(0.4, num_classes=5),
        "CutMix": T.CutMix(1.0, num_classes=5),
        "Normalize": Normalize([120.0, 110.0, 100.0], [60.0, 50.0, 70.0]),
    }


LEVEL = {torch.uint8: 1.0, torch.float32: 1 / 50 + 1e-5}  # a level; Normalize's least std: 50


def run(op: nn.Module, x: torch.Tensor, index: torch.Tensor, **kw: object) -> torch.Tensor:
    labels = index % 5
    out = T.Compose([T.RandomResizedCrop(32), op], seed=4, epoch=2, **kw)(x, labels, index=index)
    return out[0]  # the images (and the labels: mixing ops)


@pytest.mark.parametrize("name", list(ops()))
def test_each_transform_on_the_device_path_is_the_cpu_kernel_within_one_level(name: str) -> None:
    op, x, index = ops()[name], noisy(24), torch.arange(500, 524)
    cpu = run(op, x, index)
    device = run(op, x, index, cpu_kernel=False)  # the ops CUDA runs, on CPU tensors
    assert device.dtype == cpu.dtype and device.shape == cpu.shape
    assert (device.double() - cpu.double()).abs().max() <= LEVEL[cpu.dtype]
    # Reproducible by (seed, epoch, index): a sample alone, or in any order, is itself.
    order = torch.randperm(24, generator=torch.Generator().manual_seed(0))
    assert torch.equal(run(op, x[order], index[order], cpu_kernel=False), device[order]) or (
        name in ("MixUp", "CutMix")  # mixes each sample with the one before it in the batch
    )
    if name not in ("MixUp", "CutMix"):
        alone = run(op, x[5:6], index[5:6], cpu_kernel=False)
        assert torch.equal(alone, device[5:6])
    again = run(op, x, index, cpu_kernel=False)
    assert torch.equal(again, device)


def test_the_device_path_is_taken_and_rounds_differently_only_at_ties() -> None:
    x, index = noisy(32), torch.arange(32)
    ops = [T.RandomResizedCrop(40), T.RandomHorizontalFlip(), T.ColorJitter(0.3, 0.3, 0.3, 0.1)]
    cpu = T.Compose(ops, seed=1)(x, index=index)
    device = T.Compose(ops, seed=1, cpu_kernel=False)(x, index=index)
    differ = (cpu != device).float().mean()
    assert 0 < differ < 0.01 and (cpu.int() - device.int()).abs().max() == 1
    assert not torch.equal(
        T.Compose(ops, seed=1, epoch=1, cpu_kernel=False)(x, index=index), device
    )
