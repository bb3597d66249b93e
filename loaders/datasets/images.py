"""ImageShardDataset: a packed image dataset (`prep pack`) as tuples of tensors."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Unpack

from loaders.datasets.base import Decoding
from loaders.datasets.samples import SampleDataset
from loaders.read.batches import Batch


class ImageShardDataset(SampleDataset):
    """A SampleDataset of an image pack whose batches are tuples in `fields` order: "image"
    uint8 (C, H, W), a channels-last view of the HWC storage; "mask" uint8 (H, W) class ids;
    "label" int64 (); "orig_size" int64 (2,), the source's (h, w); "index" int64 ().
    `fast_dct`: JPEG through libjpeg-turbo's fast integer IDCT (README: Fast DCT).
    Use `make_loader` (or `collate_fn=collate_batch`) to keep the batched read."""

    dicts = False

    def __init__(
        self,
        root: str | os.PathLike[str],
        size: int | None = None,
        fields: Sequence[str] = ("image", "label"),
        in_memory: bool = False,
        *,
        fast_dct: bool = False,
        **opts: Unpack[Decoding],
    ):
        if "source" in fields:
            raise ValueError(
                f"{root} has no field ['source'] to batch: its paths are bytes, not a tensor. "
                "HINT: ds.source(i) gives sample i's"
            )
        self.fast_dct = fast_dct
        super().__init__(root, fields, size, in_memory=in_memory, **opts)

    @property
    def classes(self) -> list[str] | None:
        return self.store.manifest.classes

    def __getitems__(self, indices: Sequence[int]) -> Batch:  # type: ignore[override]
        batch = super().__getitems__(indices).tensors
        return Batch(tuple(batch[f] for f in self.fields))  # type: ignore[call-overload]

    def _shown(self) -> dict[str, Any]:
        # in this order; SampleDataset's fields (the same) keep their place
        return {"size": self.size, "fields": self.fields, "split": self.split, **super()._shown()}
