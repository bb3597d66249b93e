"""A worker's batch as one buffer: every tensor the dataset made outside the worker's ring
(a ragged field's tensor a sample, padded boxes, lengths, labels) copied into one segment of it,
with where each lies. Each tensor sent alone is a new shared-memory file a batch (256 boxes
tensors: 256 files, four fifths of a 2-worker epoch of detection samples, issue 40); one
segment of the ring is reused, and the main process hands it out with the pixels. A ragged
field's list of tensors goes as one flat tensor and its lengths: one copy in the worker and one
split in the main process, not one a sample (a batch of 256: 6 ms and 4 ms before)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

ALIGN = 64  # bytes: each tensor's start in the buffer, a multiple of every dtype's size


@dataclass
class Packed:
    """A batch whose stray tensors lie in `buf`; `shape` holds Slot(i) where tensor i was."""

    buf: torch.Tensor  # uint8, a prefix of a ring segment
    shape: Any
    where: list[tuple[int, torch.dtype, tuple[int, ...]]]  # byte offset, dtype, shape

    def unpack(self, buf: torch.Tensor, skeleton: Any = None) -> Any:
        """The batch, each tensor a view of `buf` (`self.buf` as the main process maps it, or its
        copy in pinned memory), in `skeleton` (default: `self.shape`; one whose other tensors the
        main process has handed out already)."""
        views = [
            buf[at : at + _nbytes(dtype, shape)].view(dtype).view(shape)
            for at, dtype, shape in self.where
        ]
        return _fill(self.shape if skeleton is None else skeleton, views)


@dataclass(frozen=True)
class Slot:
    i: int


@dataclass(frozen=True)
class Split(Slot):
    """Where a list of tensors was: tensor i holds them end to end along dim 0."""

    lengths: tuple[int, ...]


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return int(torch.Size(shape).numel()) * dtype.itemsize


def _stray(x: Any, held: Callable[[torch.Tensor], bool]) -> bool:
    return (
        isinstance(x, torch.Tensor)
        and type(x) is torch.Tensor  # not a subclass (its type would be lost)
        and x.is_cpu
        and not (x.is_nested or x.is_sparse or x.requires_grad or held(x))
    )


def _flat(x: list[Any], held: Callable[[torch.Tensor], bool]) -> bool:
    """A ragged field's list: stray tensors of one dtype and one shape but their first side."""
    if len(x) < 2 or not all(_stray(v, held) and v.dim() >= 1 for v in x):
        return False
    return len({(v.dtype, v.shape[1:]) for v in x}) == 1


def _strip(x: Any, found: list[Any], held: Callable[[torch.Tensor], bool]) -> Any:
    """`x` with each stray tensor, or list of them (`_flat`), replaced by its Slot (Split) in
    `found`; plain containers only."""
    if type(x) is list and _flat(x, held):
        found.append(x)
        return Split(len(found) - 1, tuple(len(v) for v in x))
    if type(x) in (tuple, list):
        return type(x)(_strip(v, found, held) for v in x)
    if type(x) is dict:
        return {k: _strip(v, found, held) for k, v in x.items()}
    if _stray(x, held):
        found.append(x)
        return Slot(len(found) - 1)
    return x


def _fill(x: Any, views: list[torch.Tensor]) -> Any:
    if type(x) in (tuple, list):
        return type(x)(_fill(v, views) for v in x)
    if type(x) is dict:
        return {k: _fill(v, views) for k, v in x.items()}
    if isinstance(x, Split):
        return list(views[x.i].split(x.lengths))
    return views[x.i] if isinstance(x, Slot) else x


def pack(
    data: Any,
    alloc: Callable[[str, tuple[int, ...], torch.dtype], torch.Tensor],
    held: Callable[[torch.Tensor], bool],
) -> Any:
    """`data` as a Packed whose buffer `alloc` gives (sized to a power of two, so that a ring
    reuses it); as it is when no tensor is stray (`held`: one already in the ring)."""
    found: list[Any] = []
    shape = _strip(data, found, held)
    if not found:
        return data
    where, at = [], 0
    for t in found:
        first = t if torch.is_tensor(t) else t[0]
        dims = tuple(t.shape) if torch.is_tensor(t) else (sum(len(v) for v in t), *first.shape[1:])
        where.append((at, first.dtype, dims))
        at += -(-_nbytes(first.dtype, dims) // ALIGN) * ALIGN
    buf = alloc("packed", (1 << max(at - 1, 1).bit_length(),), torch.uint8)[:at]
    for t, (start, dtype, dims) in zip(found, where, strict=True):
        out = buf[start : start + _nbytes(dtype, dims)].view(dtype).view(dims)
        if not out.numel():
            continue
        if torch.is_tensor(t):
            out.copy_(t)
        else:  # a ragged field's tensors, end to end
            torch.cat(t, out=out)
    return Packed(buf, shape, where)


class PackInWorker:
    """A picklable collate_fn: the batch collated, then packed into the worker's ring."""

    def __init__(self, collate: Callable[[Any], Any], alloc: Any, held: Any):
        self.collate = collate
        self.alloc, self.held = alloc, held

    def __call__(self, batch: Any) -> Any:
        alloc = self.alloc()  # this worker's ring (set when the worker started)
        out = self.collate(batch)
        return out if alloc is None else pack(out, alloc, self.held)


def available_cores() -> int:
    """The cores this process may run on: its affinity (a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on macOS and Windows
        return os.cpu_count() or 1


def capped(num_workers: int) -> int:
    """`num_workers`, at most one a core this process may use, said in one line when cut: more
    workers than cores take turns, each holding a batch and its ring segments while it waits
    (issue 40)."""
    cores = available_cores()
    if num_workers <= cores:
        return num_workers
    warnings.warn(
        f"make_loader: num_workers={num_workers} on the {cores} cores this process may use: "
        f"{cores} workers. HINT: pass num_workers={cores} or fewer",
        stacklevel=3,
    )
    return cores
