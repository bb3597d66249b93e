"""What every batch augmentation shares: the Op, and the one loop a pipeline runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from loaders.augment.batch import Sample
from loaders.augment.boxes import Ragged, Targets, instance_masks, outputs
from loaders.augment.random import stream_key, uniform
from loaders.augment.resample import settle


class Op(nn.Module):
    """One batch augmentation: `augment(sample, key)` with the key of its stream of draws.

    Called alone, `op(images, labels, index=index, mask=mask)` runs it as a one-op pipeline
    (see loaders.transforms.Compose, which gives each op its key from (seed, epoch)).
    `lazy` ops take a sample whose `pending` crop is not made yet; for the others Compose makes
    it first (loaders.augment.geometry.settle), as a caller of `augment` must."""

    lazy = False

    def augment(self, sample: Sample, key: int) -> Sample:
        raise NotImplementedError

    def draws(self, key: int, sample: Sample, k: int) -> torch.Tensor:
        """k uniforms per sample, float64 (B, k), on the batch's device."""
        return uniform(key, sample.index.to(sample.images.device), k)

    def forward(
        self, images: torch.Tensor, labels: torch.Tensor | None = None, **kw: Any
    ) -> torch.Tensor | tuple[Any, ...]:
        """`kw`: index=, mask=, boxes=... as for Compose, and seed=, epoch= (default 0)."""
        seed, epoch = kw.pop("seed", 0), kw.pop("epoch", 0)
        key = stream_key(seed, epoch, type(self).__name__)  # as Compose's first op of its class
        return run([(self, key)], images, labels, **kw)


def run(
    ops: list[tuple[nn.Module, int]],
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
    min_size: float = 1.0,
) -> torch.Tensor | tuple[Any, ...]:
    """A batch through `ops`, each with the key of its stream of draws (Compose gives them from
    (seed, epoch)); any other module (Normalize) gets the images only. Returns the images alone,
    or a tuple of the images and those of labels, mask, boxes, keypoints, instances, lengths
    and per_box that were given, in that order (loaders.augment.boxes: sanitized)."""
    if images.dim() != 4 or index.shape != images.shape[:1]:
        raise ValueError(
            f"expected images (B, C, H, W) and index (B,), got {tuple(images.shape)} and "
            f"{tuple(index.shape)}. HINT: ask the dataset for fields=(..., 'index')"
        )
    if mask is not None and mask.shape != images.shape[:1] + images.shape[2:]:
        raise ValueError(f"mask {tuple(mask.shape)} is not (B, H, W) of {tuple(images.shape)}")
    if (per_box is not None or instances is not None) and boxes is None:
        raise ValueError("per_box= and instances= are per box: pass boxes= too")
    targets = None
    if boxes is not None or keypoints is not None:
        targets = Targets.of(len(images), boxes, keypoints, lengths).to(images.device)
    stack = None if targets is None else instance_masks(instances, lengths, targets, images)
    sample = Sample(images, index, labels, mask, targets=targets, instances=stack)
    for op, key in ops:
        if isinstance(op, Op):
            sample = op.augment(settle(sample) if not op.lazy else sample, key)
        else:
            sample = settle(sample)
            sample = sample.but(images=op(sample.images))
    sample = settle(sample)
    pairs = ((sample.labels, labels), (sample.mask, mask))
    given: list[Any] = [t for t, asked in pairs if asked is not None and t is not None]
    if sample.targets is not None:
        asked = {"boxes": boxes, "keypoints": keypoints, "instances": instances}
        moved = {"instances": sample.instances}
        given += outputs(
            sample.targets, sample.canvas, min_size, asked | {"per_box": per_box}, lengths, moved
        )
    return (sample.images, *given) if given else sample.images
