"""MixedDataset: datasets read as one. Epoch e of `length` L: source k gives n_k = L * w_k
samples (largest remainder) at its positions in rng([seed, 0, e])'s shuffle, its passes'
[e * step_k, e * step_k + n_k), each pass shuffled by rng([seed, 1, k, pass]); step_k = n_k
("wrap"), or len_k with L cut to the longest epoch no source runs out in ("stop").

>>> counts(10, np.array([0.6, 0.3, 0.1])).tolist()
[6, 3, 1]
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from loaders.datasets.samples import SampleBatch
from loaders.read.buffers import new_batch, read_into
from loaders.read.loader import Batch, check_indices

MIXTURE = "mixture"  # the field that says each sample's source: its index in `datasets`
EXHAUSTED = ("wrap", "stop")
PASSES_KEPT = 4  # permutations cached per source (a batch of a big source spans at most 2)
_KEEPING = threading.Lock()  # around changes to the caches of permutations


def counts(length: int, weights: np.ndarray) -> np.ndarray:
    """`length * weights` rounded by largest remainder (ties: the first) to sum to `length`."""
    exact = length * weights
    n = np.floor(exact).astype(np.int64)
    extra = np.argsort(-(exact - n), kind="stable")[: length - int(n.sum())]
    n[extra] += 1
    return n


def epoch_length(sizes: np.ndarray, weights: np.ndarray, length: int | None, stop: bool) -> int:
    """`length` (default: the sources' total), with `stop` cut to where no source runs out."""
    if length is not None and length < 1:
        raise ValueError(f"length {length} must be at least 1 sample")
    total = int(sizes.sum()) if length is None else length
    if not stop:
        return total
    n = min(total, int(np.min(np.floor(sizes / weights + 1e-9))))  # 24 / 0.6: 39.999...
    while n > 0 and (counts(n, weights) > sizes).any():  # a rounding up past a source's size
        n -= 1
    if n == 0:
        raise ValueError(f"sources of {sizes.tolist()} samples give no epoch at these weights")
    return n


class MixedDataset(Dataset[Any]):
    """`datasets` read as one of `length` samples an epoch, source k's share `weights[k]`
    (default: by size), each source read once a batch. A batch has the sources' `fields`
    (default: theirs, the same for all), then MIXTURE, int64 (B,): each sample's source.
    `set_epoch(e)` sets the plan's (and the sources') epoch: call it every epoch.

    Examples:
        >>> from loaders import ImageShardDataset, MixedDataset
        >>> a = ImageShardDataset("data/demo-packed", size=128)
        >>> b = ImageShardDataset("data/demo-splits", size=128, split="train")
        >>> mixed = MixedDataset([a, b], weights=[0.7, 0.3], seed=0, length=100)
        >>> len(mixed)
        100
    """

    def __init__(
        self,
        datasets: Sequence[Any],
        weights: Sequence[float] | None = None,
        seed: int = 0,
        length: int | None = None,
        exhausted: str = "wrap",
        fields: Sequence[str] | None = None,
    ):
        if not datasets:
            raise ValueError("MixedDataset needs at least one dataset")
        if exhausted not in EXHAUSTED:
            raise ValueError(f"exhausted={exhausted!r} is not one of {', '.join(EXHAUSTED)}")
        self.datasets, self.seed, self.exhausted = list(datasets), seed, exhausted
        self.sizes = np.array([len(d) for d in self.datasets], dtype=np.int64)
        w = np.asarray(self.sizes if weights is None else weights, dtype=np.float64)
        if w.shape != (len(self.datasets),) or not np.isfinite(w).all() or (w <= 0).any():
            raise ValueError(f"weights {w.tolist()}: one positive number per dataset")
        if (self.sizes == 0).any():
            raise ValueError(f"dataset {int(np.argmin(self.sizes))} is empty: it cannot be drawn")
        self.weights = w / w.sum()
        self.fields, self._names = common_fields(self.datasets, fields)
        # A batch: items when a source reads items; a dict when every source gives one
        self._itemized = any(getattr(d, "itemized", False) for d in self.datasets)
        self._dicts = all(getattr(d, "dicts", False) for d in self.datasets)
        self.length = epoch_length(self.sizes, self.weights, length, exhausted == "stop")
        self.counts = counts(self.length, self.weights)
        self._now = torch.zeros(1, dtype=torch.int64).share_memory_()  # the epoch, for workers
        self._plans: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._perms: list[dict[int, np.ndarray]] = [{} for _ in self.datasets]

    def __getstate__(self) -> dict[str, Any]:  # the plans are remade in each process
        return {**self.__dict__, "_plans": {}, "_perms": [{} for _ in self.datasets]}

    def __len__(self) -> int:
        return self.length

    @property
    def epoch(self) -> int:
        return int(self._now[0])

    def set_epoch(self, epoch: int) -> None:
        if epoch < 0:
            raise ValueError(f"epoch {epoch} must be non-negative")
        self._now[0] = epoch
        for d in self.datasets:
            if hasattr(d, "set_epoch"):
                d.set_epoch(epoch)

    @property
    def read_threads(self) -> int | None:  # make_loader's threads: the most a source asks for
        asked = [t for d in self.datasets if (t := getattr(d, "read_threads", None))]
        return max(asked, default=None)

    def batch_problem(self, batch_size: int) -> str | None:  # make_loader asks (VolumeDataset)
        problems = [getattr(d, "batch_problem", lambda b: None)(batch_size) for d in self.datasets]
        return next((p for p in problems if p), None)

    def _plan(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Each position's source, and its rank among the positions of that source."""
        plan = self._plans.get(epoch)
        if plan is None:
            ids = np.repeat(np.arange(len(self.datasets), dtype=np.int16), self.counts)
            src = np.random.default_rng([self.seed, 0, epoch]).permutation(ids)
            by_source = np.argsort(src, kind="stable")
            first = np.cumsum(self.counts) - self.counts
            rank = np.empty(self.length, dtype=np.int64)
            rank[by_source] = np.arange(self.length) - np.repeat(first, self.counts)
            plan = (src, rank)
            self._plans = {epoch: plan}  # one epoch kept (set between epochs)
        return plan

    def _pass(self, k: int, p: int) -> np.ndarray:
        """Pass `p` over source k: a permutation of its indices (4 bytes a sample)."""
        kept = self._perms[k]
        perm = kept.get(p)
        if perm is None:
            perm = np.random.default_rng([self.seed, 1, k, p]).permutation(int(self.sizes[k]))
            perm = perm.astype(np.int32 if self.sizes[k] < 2**31 else np.int64)
            with _KEEPING:  # make_loader's threads read batches at once
                while len(kept) >= PASSES_KEPT:
                    del kept[next(iter(kept))]  # the oldest
                kept[p] = perm
        return perm

    def locate(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each index's source and its index in that source, in the current epoch."""
        idx = check_indices(indices, self.length)
        epoch = self.epoch
        src, rank = self._plan(epoch)
        which = src[idx].astype(np.int64)
        step = self.counts[which] if self.exhausted == "wrap" else self.sizes[which]
        passes, offset = np.divmod(epoch * step + rank[idx], self.sizes[which])
        local = np.empty(len(idx), dtype=np.int64)
        span = int(passes.max(initial=0)) + 1
        for key in np.unique(which * span + passes).tolist():  # each (source, pass) of the batch
            here = which * span + passes == key
            local[here] = self._pass(*divmod(key, span))[offset[here]]
        return which, local

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> Any:
        which, local = self.locate(indices)
        parts: list[tuple[np.ndarray, dict[str, Any]]] = []
        # Sources read into plain memory: only the mixture's batch takes the loader's buffers
        before = read_into(lambda key, shape, dtype: torch.empty(shape, dtype=dtype))
        try:
            for k in np.unique(which).tolist() or [0]:  # one read a source (an empty batch: 0)
                rows = np.flatnonzero(which == k)
                ds = self.datasets[k]
                read = getattr(ds, "__getitems__", None)
                got = read(local[rows]) if read else [ds[i] for i in local[rows].tolist()]
                parts.append((rows, self._columns(k, got)))
        finally:
            read_into(before)
        mixture = torch.from_numpy(which)
        if self._itemized:  # samples of shapes of their own: a list of them, as the sources'
            items: list[Any] = [None] * len(which)
            for rows, cols in parts:
                values = [cols[f] for f in self.fields]
                values = [list(v.unbind()) if torch.is_tensor(v) else v for v in values]
                for j, r in enumerate(rows.tolist()):
                    items[r] = (*(v[j] for v in values), mixture[r])
            return items
        names = [n for n in parts[0][1] if all(n in cols for _, cols in parts)]
        padded = {n[: -len("_len")] for n in names if n.endswith("_len")}
        out = {n: merge(n, [(rows, c[n]) for rows, c in parts], n in padded) for n in names}
        if self._dicts:
            return SampleBatch({**out, MIXTURE: mixture}, len(which))
        return Batch((*(out[n] for n in self.fields), mixture))

    def _columns(self, k: int, got: Any) -> dict[str, Any]:
        """Source k's read as {name: its batch of the field}, or {name: its items' values}."""
        names = self._names[k]
        if isinstance(got, SampleBatch):
            cols: dict[str, Any] = got.tensors  # type: ignore[assignment]
            keep = {n for f in self.fields for n in (f, f"{f}_len")}
            return {n: v for n, v in cols.items() if n in keep}
        if isinstance(got, Batch):
            return {f: got.tensors[names.index(f)] for f in self.fields}
        items = [it if isinstance(it, tuple | list) else (it,) for it in got]
        return {f: [it[names.index(f)] for it in items] for f in self.fields}

    def __repr__(self) -> str:
        shares = ", ".join(f"{w:.3g}" for w in self.weights)
        return (
            f"MixedDataset({len(self.datasets)} datasets, weights=[{shares}], samples={len(self)}"
            f", exhausted={self.exhausted!r}, fields={self.fields})"
        )


def common_fields(
    datasets: Sequence[Any], fields: Sequence[str] | None
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The mixture's fields (`fields`, all sources' by default) and each source's `outputs`."""
    unnamed = [d for d in datasets if getattr(d, "outputs", None) is None]
    if unnamed:
        raise TypeError(
            f"MixedDataset cannot name the fields of a {type(unnamed[0]).__name__}. HINT: mix "
            "datasets of loaders (ImageShardDataset, SampleDataset, TokenWindowDataset, "
            "TableDataset...)"
        )
    names = [tuple(d.outputs) for d in datasets]
    if fields is None:
        if any(n != names[0] for n in names):
            shared = [f for f in names[0] if all(f in n for n in names)]
            said = "; ".join(f"{k}: {', '.join(n)}" for k, n in enumerate(names))
            raise ValueError(
                f"the datasets' fields differ ({said}). HINT: give each the same fields, or "
                f"pass fields= naming fields all of them have ({', '.join(shared) or 'none'})"
            )
        fields = names[0]
    for k, n in enumerate(names):
        missing = [f for f in fields if f not in n]
        if missing:
            raise ValueError(f"dataset {k} has no field {missing}; it has {list(n)}")
    if MIXTURE in fields or not fields:
        raise ValueError(f"fields {list(fields)}: name at least one, and not {MIXTURE!r}")
    return tuple(fields), names


def merge(name: str, pieces: list[tuple[np.ndarray, Any]], padded: bool = False) -> Any:
    """One field of the mixture's batch from the sources' (`rows`: where each one's go)."""
    b = sum(len(rows) for rows, _ in pieces)
    first = pieces[0][1]
    if not isinstance(first, torch.Tensor) or first.is_nested:
        out: list[Any] = [None] * b
        for rows, v in pieces:
            for r, x in zip(rows.tolist(), v.unbind() if torch.is_tensor(v) else v, strict=True):
                out[r] = x
        if torch.is_tensor(first):
            return torch.nested.as_nested_tensor(out, layout=torch.jagged)
        return out
    dtypes = sorted({str(v.dtype) for _, v in pieces})
    shapes = {tuple(v.shape[1:]) for _, v in pieces}
    if len(dtypes) > 1 or len({len(s) for s in shapes}) > 1 or (len(shapes) > 1 and not padded):
        said = ", ".join(f"{tuple(v.shape[1:])} {v.dtype}" for _, v in pieces)
        raise ValueError(
            f"the sources give field {name!r} as {said}: they cannot be batched together. "
            "HINT: open each at the same size (size=, crop=, block_size=) and dtype"
        )
    shape = tuple(max(dims) for dims in zip(*shapes, strict=True))
    if first.device.type != "cpu":  # decode="cuda"
        out_t = torch.empty((b, *shape), dtype=first.dtype, device=first.device)
    elif _channels_last(first):  # images: a (B, C, H, W) view of the loader's (B, H, W, C)
        c, h, w = shape
        out_t = new_batch((b, h, w, c), first.dtype, key=name).permute(0, 3, 1, 2)
    else:
        out_t = new_batch((b, *shape), first.dtype, key=name)
    if len(shapes) > 1:
        out_t.zero_()
    for rows, v in pieces:
        at = torch.from_numpy(rows).to(v.device)
        if tuple(v.shape[1:]) == shape:
            # Channels-last images copied as their (B, H, W, C) rows, on the CPU by numpy:
            # 15x faster than torch's uint8 index_copy_ (1.3 ms for 2 MB).
            last = _channels_last(v)
            dst, src = (out_t.permute(0, 2, 3, 1), v.permute(0, 2, 3, 1)) if last else (out_t, v)
            if dst.device.type == "cpu" and dst.is_contiguous() and src.is_contiguous():
                dst.numpy()[rows] = src.numpy()
            else:
                dst.index_copy_(0, at, src)
        else:
            where: tuple[Any, ...] = (at, *(slice(0, d) for d in v.shape[1:]))
            out_t[where] = v
    return out_t


def _channels_last(t: torch.Tensor) -> bool:
    """A (B, C, H, W) view of (B, H, W, C) memory (ImageShardDataset's batches)."""
    last = t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)
    return last and not t.is_contiguous()
