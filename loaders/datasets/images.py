"""ImageShardDataset: the images of a packed dataset (`prep pack`) as tuples of tensors, a view
of SampleDataset with the fields of an image pack."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Unpack

from loaders.augment.crops import Crop
from loaders.datasets.base import Remote
from loaders.datasets.samples import SampleDataset
from loaders.read.batches import Batch
from loaders.read.store import DEFAULT_MAX_OPEN


class ImageShardDataset(SampleDataset):
    """Samples of a packed image dataset, as a tuple in `fields` order, each as its field makes
    it (loaders.fields):

    - "image": uint8 (C, H, W), a channels-last view of the HWC storage (no copy, no permute);
    - "mask": uint8 (H, W) class ids;  "label": int64 ();  "orig_size": int64 (2,) source (h, w);
    - "index": int64 (), the sample's dataset index, never stored (for loaders.transforms).

    Shard files are memory-mapped lazily by `self.store`, at most `max_open` at a time, and never
    pickled: the object pickles to under 1 KB for spawn workers, whatever its shard and class
    count. A batch is read by `__getitems__` in one call: one vectorised read when it lies in
    one shard, else one copy per sample straight into place; use `make_loader` (or
    `collate_fn=collate_batch`) to keep that path. Each batch first checks that the folder was
    not repacked since the dataset was made (FormatError if it was).

    `in_memory=True` reads the requested fields, at every size the dataset holds (so set_size
    still works), into shared memory once, here: for slow or network disks. DataLoader workers,
    forked or spawned, map that one copy instead of copying it or reading the disk. JPEG sizes
    stay compressed there (about 1/7 of their pixels' RAM at q90).

    `crop=` (`CenterCrop(s)`, `RandomResizedCrop(s, scale, ratio, seed)`: loaders.augment.crops)
    crops images and masks to one shape: required for `--mode keep` sizes. Boxes depend on
    (seed, epoch, index): call `set_epoch(e)`. JPEG is decoded on `threads` threads (default: up
    to 4 cores; one in a DataLoader worker), or by `decode="cuda"` on the GPU, a batch at once
    in the main process (the `gpu` extra). Bad bytes raise FormatError naming shard and sample.

    `root` may be an fsspec URL (s3://, gs://, http(s)://): shard files are fetched once per
    node into `cache_dir` (default ~/.cache/prep), verified, and mapped; `cache_limit` (bytes or
    "200GB") bounds it; `storage_options` passes through to fsspec (see loaders.remote).

    `split="val"` reads one split of a dataset packed with `--splits` or `--val-fraction` (its
    indices run from 0 over that split's shards); None reads every shard.
    """

    dicts = False  # a tuple in `fields` order

    def __init__(
        self,
        root: str | os.PathLike[str],
        size: int | None = None,
        fields: Sequence[str] = ("image", "label"),
        in_memory: bool = False,
        *,
        crop: Crop | None = None,
        decode: str = "cpu",
        threads: int | None = None,
        fast_dct: bool = False,
        split: str | None = None,
        max_open: int = DEFAULT_MAX_OPEN,
        **remote: Unpack[Remote],
    ):
        if "source" in fields:
            raise ValueError(
                f"{root} has no field ['source'] to batch: its paths are bytes, not a tensor. "
                "HINT: ds.source(i) gives sample i's"
            )
        self.fast_dct = fast_dct  # JPEG: libjpeg-turbo's fast integer IDCT (README: Fast DCT)
        super().__init__(
            root,
            fields,
            size,
            crop=crop,
            decode=decode,
            threads=threads,
            in_memory=in_memory,
            split=split,
            max_open=max_open,
            **remote,
        )

    @property
    def classes(self) -> list[str] | None:
        return self.store.manifest.classes

    def __getitems__(self, indices: Sequence[int]) -> Batch:  # type: ignore[override]
        batch = super().__getitems__(indices).tensors
        return Batch(tuple(batch[f] for f in self.fields))  # type: ignore[call-overload]

    def __getitem__(self, index: int) -> tuple:
        return self.__getitems__([index])[0]

    def __repr__(self) -> str:
        return (
            f"ImageShardDataset({str(self.store.root)!r}, size={self.size}, fields={self.fields}, "
            f"split={self.split!r}, "
            f"samples={len(self)}, shards={len(self._starts) - 1}, sizes={self.sizes})"
        )
