"""What every batch op shares: the batch (Sample), tensor helpers, Op, Compose and `settle`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from loaders.augment import batchcrop, kernel
from loaders.augment.boxes import Ragged, Targets, outputs
from loaders.augment.boxes import per_box as padded_per_box  # Compose has a per_box= argument
from loaders.augment.random import stream_key, uniform


@dataclass
class Sample:
    """A batch in a pipeline: images (B, C, H, W); labels (B,), or (B, classes) once mixed; mask
    (B, H, W); index (B,), the draws' dataset indices; pending, a crop not made yet (the ops
    after it fold into it); targets in `canvas` pixels; instances (B, H, W, N), as a mask.

    Examples:
        >>> # what an Op's augment(sample, key) receives and returns: see Op's example
        >>> from loaders.transforms import Sample
    """

    images: torch.Tensor
    index: torch.Tensor
    labels: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    pending: Resize | None = None
    targets: Targets | None = None
    instances: torch.Tensor | None = None
    kernel: bool = True  # False: the whole-batch ops CUDA runs, also on CPU tensors

    @property
    def canvas(self) -> tuple[int, int]:
        """(H, W) of the images once the pending crop is made."""
        if self.pending is not None:
            return self.pending.size
        H, W = self.images.shape[-2:]
        return int(H), int(W)

    def masks(
        self, move: Callable[[torch.Tensor, int], torch.Tensor], fill: int = 0
    ) -> dict[str, torch.Tensor | None]:
        """The mask and the instances (fill 0) through move(x, fill), for `but`."""
        m, i = self.mask, self.instances
        return {
            "mask": None if m is None else move(m, fill),
            "instances": None if i is None else move(i, 0),
        }

    def but(self, **changes: Any) -> Sample:
        """A copy with some tensors replaced: ops never change the batch they were given."""
        return replace(self, **changes)


@dataclass
class Resize:
    """Each sample's box (top, left, height, width) (B, 4) to resample to `size`, and flip (B,)."""

    boxes: torch.Tensor
    size: tuple[int, int]
    flip: torch.Tensor | None = None


NUMPY = {torch.uint8: np.uint8, torch.float32: np.float32, torch.float64: np.float64}
HUGE = 1 << 22  # numpy madvises huge pages for buffers of 4 MiB and more


def empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """torch.empty, but large CPU buffers come from numpy, which asks Linux for huge pages:
    torch's page faults per 4 KiB cost more than the op that fills them (154 MB: 100 ms, not 30)."""
    size = math.prod(shape) * dtype.itemsize
    if device.type == "cpu" and dtype in NUMPY and size >= HUGE:
        return torch.from_numpy(np.empty(shape, dtype=NUMPY[dtype]))
    return torch.empty(shape, dtype=dtype, device=device)


def empty_like(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor of x's shape, device and layout (channels-last or contiguous)."""
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        B, C, H, W = x.shape
        return empty((B, H, W, C), dtype, x.device).permute(0, 3, 1, 2)
    return empty(tuple(x.shape), dtype, x.device)


def to_images(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """An op's float result `x` (rounded in place) in the dtype of `like`. For uint8, x must lie
    in 0..255 (blends and bilinear samples of pixels do), so +0.5 and truncation round it."""
    if like.dtype == torch.uint8:
        return empty_like(x, torch.uint8).copy_(x.add_(0.5))
    return x.to(like.dtype)


def working(x: torch.Tensor) -> torch.Tensor:
    """The float form an op computes in: float32 for uint8, the float dtype itself otherwise."""
    return x if x.is_floating_point() else empty_like(x, torch.float32).copy_(x)


class Op(nn.Module):
    """One batch op: `augment(sample, key)`; only a `lazy` one is given a crop `pending`.

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> class Invert(T.Op):  # an op of yours: its draws from self.draws, so they are per sample
        ...     def augment(self, sample, key):
        ...         flip = self.draws(key, sample, 1)[:, 0] < 0.5
        ...         sample.images = torch.where(flip[:, None, None, None], 255 - sample.images,
        ...                                     sample.images)
        ...         return sample
        >>> T.Compose([Invert(), T.CenterCrop(16)], seed=0)(images, index=index).shape
        torch.Size([4, 3, 16, 16])
    """

    lazy = False
    shown: tuple[str, ...] = ()  # the attributes repr() shows

    def augment(self, sample: Sample, key: int) -> Sample:
        raise NotImplementedError

    def draws(self, key: int, sample: Sample, k: int) -> torch.Tensor:
        """k uniforms per sample, float64 (B, k), on the batch's device."""
        return uniform(key, sample.index.to(sample.images.device), k)

    def forward(
        self, images: torch.Tensor, labels: torch.Tensor | None = None, **kw: Any
    ) -> torch.Tensor | tuple[Any, ...]:
        """`kw`: index=, mask=, boxes=... as for Compose, and its seed=, epoch=, min_size=,
        cpu_kernel=."""
        given = {k: kw.pop(k) for k in ("seed", "epoch", "min_size", "cpu_kernel") if k in kw}
        pipe = Compose([self], **given)
        return pipe(images, labels, **kw)

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={getattr(self, name)}" for name in self.shown)


class Compose(nn.Module):
    """Ops applied in order to a batch (a module not an Op gets the images). Returns the images,
    or them and the labels, mask, boxes, keypoints, instances, lengths, per_box given, in order.
    cpu_kernel=False: a uint8 CPU batch takes the whole-batch torch ops CUDA runs (one level
    apart from the per-sample kernel at most), not loaders.augment.kernel's pass.

    Examples:
        >>> import torch
        >>> from loaders import transforms as T
        >>> images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> index = torch.arange(4)  # the samples' dataset indices: each draws its own parameters
        >>> aug = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(0.5)], seed=0)
        >>> aug.set_epoch(1)
        >>> x = aug(images, index=index)
        >>> x.shape, torch.equal(x, aug(images, index=index))  # the same draws for the same indices
        (torch.Size([4, 3, 24, 24]), True)
    """

    def __init__(
        self,
        ops: Iterable[nn.Module],
        seed: int = 0,
        epoch: int = 0,
        min_size: float = 1.0,
        cpu_kernel: bool = True,
    ):
        super().__init__()
        self.ops = nn.ModuleList(ops)
        self.seed, self.min_size, self.cpu_kernel = seed, min_size, cpu_kernel
        self.set_epoch(epoch)  # refuses a negative seed or epoch now
        # Each op's stream: its class name, "#k" for its k-th repeat (a pipeline's first
        # RandomResizedCrop draws what a decode-time one draws).
        names = [type(op).__name__ for op in self.ops]
        self._names = [f"{n}#{k}" if (k := names[:i].count(n)) else n for i, n in enumerate(names)]

    def set_epoch(self, epoch: int) -> None:
        stream_key(self.seed, epoch, "")
        self.epoch = epoch

    def forward(
        self,
        images: torch.Tensor,
        labels: torch.Tensor | None = None,
        *,
        index: torch.Tensor,
        mask: torch.Tensor | None = None,
        boxes: Ragged = None,
        keypoints: Ragged = None,
        instances: Ragged = None,
        lengths: torch.Tensor | None = None,
        per_box: Mapping[str, Ragged] | None = None,
    ) -> torch.Tensor | tuple[Any, ...]:
        if images.dim() != 4 or index.shape != images.shape[:1]:
            raise ValueError(
                f"expected images (B, C, H, W) and index (B,), got {tuple(images.shape)} and "
                f"{tuple(index.shape)}. HINT: ask the dataset for fields=(..., 'index')"
            )
        if mask is not None and mask.shape != images.shape[:1] + images.shape[2:]:
            raise ValueError(f"mask {tuple(mask.shape)} is not (B, H, W) of {tuple(images.shape)}")
        if (per_box is not None or instances is not None) and boxes is None:
            raise ValueError("per_box= and instances= are per box: pass boxes= too")
        targets = stack = None
        if boxes is not None or keypoints is not None:
            targets = Targets.of(len(images), boxes, keypoints, lengths).to(images.device)
        if targets is not None and instances is not None:  # moved as a mask: (B, H, W, N)
            stack = padded_per_box(instances, lengths, targets, "instances").permute(0, 2, 3, 1)
            if stack.shape[1:3] != images.shape[-2:]:
                hw = tuple(images.shape[-2:])
                raise ValueError(f"instances of {tuple(stack.shape[1:3])} px for images of {hw}")
        sample = Sample(images, index, labels, mask, targets=targets, instances=stack)
        sample = sample.but(kernel=self.cpu_kernel)
        for op, name in zip(self.ops, self._names, strict=True):
            key = stream_key(self.seed, self.epoch, name)
            if isinstance(op, Op):
                sample = op.augment(settle(sample) if not op.lazy else sample, key)
            else:
                sample = settle(sample)
                sample = sample.but(images=op(sample.images))
        sample = settle(sample)
        pairs = ((sample.labels, labels), (sample.mask, mask))
        given: list[Any] = [t for t, asked in pairs if asked is not None and t is not None]
        if sample.targets is not None:
            asked = dict(boxes=boxes, keypoints=keypoints, instances=instances, per_box=per_box)
            args = (sample.canvas, self.min_size, asked, lengths, sample.instances)
            given += outputs(sample.targets, *args)
        return (sample.images, *given) if given else sample.images

    def extra_repr(self) -> str:
        return f"seed={self.seed}, epoch={self.epoch}"


def take(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """x[b, rows[b, i], cols[b, j]] for x (B, H, W, ...): (B, len(rows), len(cols), ...)."""
    b = torch.arange(x.shape[0], device=x.device).view(-1, 1, 1)
    return x[b, rows[:, :, None], cols[:, None, :]]


def settle(sample: Sample, color: kernel.Color | None = None) -> Sample:
    """The sample with its pending crop made (bilinear; masks nearest) and jittered by `color`:
    kernel's per-sample pass for a uint8 CPU batch, else the whole-batch crop CUDA runs."""
    p, x = sample.pending, sample.images
    if p is None and color is None:
        return sample
    H, W = x.shape[-2:]
    fits = sample.kernel and kernel.fits(x, color=color is not None)
    if p is None:  # colour alone: the kernel resamples at the pixels' own centres (itself)
        if not fits:
            return sample.but(images=batchcrop.crop_batch(x, None, (H, W), color=color))
        whole = torch.tensor([[0, 0, H, W]], device=x.device)
        p = Resize(whole.expand(len(sample.index), 4), (H, W))
    top, left, h, w = p.boxes.to(torch.float64).unbind(1)
    rows, cols = _centres(top, h, p.size[0]), _centres(left, w, p.size[1])
    cols = cols if p.flip is None else torch.where(p.flip[:, None], cols.flip(1), cols)
    r, c = (t.floor().to(torch.int64).clamp(0, n - 1) for t, n in ((rows, H), (cols, W)))
    masks = sample.masks(lambda m, _: take(m, r, c))
    if fits:
        images = kernel.resample(x, rows - 0.5, cols - 0.5, color)
    else:
        images = batchcrop.crop_batch(x, p.boxes, p.size, flip=p.flip, color=color)
    return sample.but(images=images, pending=None, **masks)


def _centres(start: torch.Tensor, length: torch.Tensor, out: int) -> torch.Tensor:
    """Source coordinates (B, out) of the centres of `out` pixels over [start, start + length)."""
    j = torch.arange(out, device=start.device, dtype=torch.float64) + 0.5
    return start[:, None] + j[None, :] * (length[:, None] / out)
