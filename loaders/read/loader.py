"""make_loader: a torch DataLoader that keeps the datasets' batched read path."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.collate import default_collate

from loaders.read.batches import Batch
from loaders.read.prefetch import Loader
from loaders.read.samplers import ShardSampler


def collate_batch(batch: Any) -> Any:
    """Collate for datasets with a batched `__getitems__`: a Batch is already collated.
    Samples of different shapes are said to be so, not with torch's bare stack error."""
    if isinstance(batch, Batch):
        return batch.tensors
    try:
        return default_collate(batch)
    except RuntimeError as e:
        if "equal size" not in str(e):
            raise
        parts = [t for s in batch for t in (s if isinstance(s, (tuple, list)) else (s,))]
        shapes = sorted({tuple(t.shape) for t in parts if torch.is_tensor(t)})
        raise ValueError(
            f"the samples of a batch differ in shape ({', '.join(map(str, shapes[:3]))}): they "
            "cannot be stacked. HINT: pack one shape (prep volumes --shape, prep pack without "
            "--mode keep), read fixed-size patches (PatchDataset), or load with batch_size=1"
        ) from None


# make_loader's default reading threads. On 2 busy cores 1 thread hid loading best (bench row
# 4d): reads in parallel each take longer, and the caller waits for them in order. A dataset
# may ask for more (`read_threads`: ImageShardDataset's decoding ones, whose pool does the work).
THREADS = 1 if (os.cpu_count() or 1) <= 2 else 2


def make_loader(
    dataset: Dataset[Any],
    batch_size: int,
    shuffle: bool = False,
    num_workers: int = 0,
    *,
    order: str | None = None,
    seed: int = 0,
    window: int = 8,
    distributed: bool | None = None,
    drop_last: bool = False,
    threads: int | None = None,
    **dataloader_kwargs: Any,
) -> DataLoader[Any]:
    """A DataLoader reading whole batches per call, pinned when a GPU is present, with persistent
    workers; any other DataLoader argument passes through and wins over these defaults. With
    `num_workers=0`, `threads` threads (default: the dataset's `read_threads`, else THREADS)
    read ahead while the step runs, into a ring of reused buffers, in `threads=0`'s batch order
    (loaders.read.prefetch). Worker processes are for Python-heavy datasets (the GIL serialises
    threads).

    Order and ranks (a `ShardSampler` in `loader.sampler`, see loaders.read.samplers):

    - `order`: "sequential", "random" or "quasi_random" (shuffle the shards, then the samples
      within windows of `window` shards); default "random" with `shuffle`, else "sequential".
      Shuffled orders depend only on (`seed`, epoch): the same for any `num_workers`; each pass
      over the loader advances the epoch (`loader.sampler.set_epoch(e)` sets it).
    - `distributed`: each rank reads a disjoint share of every epoch, all ranks the same number
      of batches. Default: on when torch.distributed is initialised.
    - `drop_last`: False pads the ranks' shares by repeating the epoch's first samples and keeps
      a last, smaller batch; True leaves the remainder out of the epoch (different samples each
      epoch) so that every batch is full.
    """
    _check_batches(dataset, batch_size)
    distributed = _distributed(distributed)
    if order is None:
        order = "random" if shuffle else "sequential"
    elif shuffle and order == "sequential":
        raise ValueError("shuffle=True contradicts order='sequential'; pass one of them")
    kwargs: dict[str, Any] = {
        "collate_fn": collate_batch,
        "pin_memory": torch.cuda.is_available(),
        "persistent_workers": num_workers > 0,
        "drop_last": drop_last,
    }
    if distributed or order != "sequential":
        if {"sampler", "batch_sampler"} & dataloader_kwargs.keys():
            raise ValueError("a sampler of your own replaces order=/distributed=: pass one")
        kwargs["sampler"] = _sampler(dataset, order, seed, window, distributed, drop_last)
        shuffle = False  # the sampler orders
    kwargs.update(dataloader_kwargs)
    return Loader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        threads=(getattr(dataset, "read_threads", None) or THREADS) if threads is None else threads,
        **kwargs,
    )


def _check_batches(dataset: Dataset[Any], batch_size: int) -> None:
    """Refuse at once a dataset whose samples cannot be stacked into batches of this size
    (VolumeDataset.batch_problem: whole volumes of several shapes)."""
    problem = getattr(dataset, "batch_problem", None)
    said = problem(batch_size) if problem is not None else None
    if said is not None:
        raise ValueError(said)


def _distributed(asked: bool | None) -> bool:
    """Whether to share epochs between ranks: default, when torch.distributed is initialised."""
    ddp = torch.distributed.is_available() and torch.distributed.is_initialized()
    if asked and not ddp:
        raise ValueError(
            "distributed=True needs torch.distributed initialised first: call "
            "torch.distributed.init_process_group() (torchrun sets its environment)"
        )
    return ddp if asked is None else asked


def _sampler(
    dataset: Dataset[Any], order: str, seed: int, window: int, distributed: bool, drop_last: bool
) -> ShardSampler:
    sizes = getattr(dataset, "shard_sizes", None)
    if sizes is None:
        if order == "quasi_random":
            raise ValueError(
                f"{type(dataset).__name__} has no shard_sizes, which order='quasi_random' "
                "needs; use order='random'"
            )
        sizes = [len(dataset)]  # type: ignore[arg-type]
    ranks = {} if distributed else {"num_replicas": 1, "rank": 0}
    sampler = ShardSampler(sizes, order, seed, window, drop_last=drop_last, **ranks)
    sampler.follow(dataset)  # a remote dataset prefetches the next quasi_random window
    return sampler
