"""make_loader: a torch DataLoader that keeps the datasets' batched read path."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.collate import default_collate


class Batch(Sequence[tuple[torch.Tensor, ...]]):
    """A whole batch read at once by a dataset's `__getitems__`: one tensor per field.

    It is also a sequence of per-sample tuples, so a plain DataLoader with the default collate
    still works (it stacks the samples again); `collate_batch` returns the tensors as they are."""

    def __init__(self, tensors: tuple[torch.Tensor, ...]):
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, j: int) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        return tuple(t[j] for t in self.tensors)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        return (self[j] for j in range(len(self)))


def collate_batch(batch: Any) -> Any:
    """Collate for datasets with a batched `__getitems__`: a Batch is already collated."""
    if isinstance(batch, Batch):
        return batch.tensors
    return default_collate(batch)


def make_loader(
    dataset: Dataset[Any],
    batch_size: int,
    shuffle: bool = False,
    num_workers: int = 0,
    **dataloader_kwargs: Any,
) -> DataLoader[Any]:
    """A DataLoader reading whole batches per call, with pinned memory when a GPU is present and
    persistent workers (so progressive resizing and memory maps survive epochs). Any other
    DataLoader argument passes through and wins over these defaults."""
    kwargs: dict[str, Any] = {
        "collate_fn": collate_batch,
        "pin_memory": torch.cuda.is_available(),
        "persistent_workers": num_workers > 0,
    }
    if num_workers > 0:
        kwargs["prefetch_factor"] = 2
    kwargs.update(dataloader_kwargs)
    return DataLoader(
        dataset, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers, **kwargs
    )
