"""A loader's state, to resume an epoch where it stopped (torchdata's `state_dict()` /
`load_state_dict()`): seed, order, epoch, and one global position in the epoch's order, never
per-rank counts. Rank r of N reads positions r, r + N, r + 2N... of the order (ShardSampler),
so when every rank has handed out k samples the samples delivered are exactly the order's first
k * N: a state holds that prefix's length, and a run on any other count of ranks or workers
reads the rest. Batches read ahead but not handed out are not counted.

>>> Pass(epoch=2, start=0, skip=0, share=10, batch_size=4, drop_last=False, ranks=2,
...      size=20, sets=0, handed=2).position()
16
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch.distributed as dist

from loaders.read.samplers import WINDOWED, ShardSampler

VERSION = 1
KEYS = ("version", "dataset", "samples", "order", "seed", "window", "epoch", "delivered")


@dataclass
class Pass:
    """One pass over a loader: where it starts (global `start`, this rank's `skip` more), this
    rank's `share` of samples, and the batches handed out so far (`handed`)."""

    epoch: int
    start: int
    skip: int
    share: int
    batch_size: int
    drop_last: bool
    ranks: int
    size: int  # samples in an epoch
    sets: int  # the sampler's set_epoch count when the pass began
    handed: int = 0

    def done(self) -> bool:
        whole, part = divmod(self.share, self.batch_size)
        return self.handed >= whole + (part > 0 and not self.drop_last)

    def position(self) -> int:
        """The epoch's samples delivered, over all ranks: the length of the order's prefix."""
        k = self.skip + min(self.handed * self.batch_size, self.share)
        return min(self.start + k * self.ranks, self.size)  # past it: padding, not new samples


def begin(loader: Any) -> Pass | None:
    """The pass `iter(loader)` starts, before the sampler gives its first index (workers
    take indices ahead of the batches handed out)."""
    sampler, batch_size = loader.sampler, loader.batch_size
    if not isinstance(sampler, ShardSampler) or batch_size is None:
        return None
    epoch, start, skip, share = sampler.upcoming()
    size = sum(sampler.shard_sizes)
    ranks, sets = sampler.num_replicas, sampler.sets
    return Pass(epoch, start, skip, share, batch_size, loader.drop_last, ranks, size, sets)


def counted(batches: Iterator[Any], now: Pass) -> Iterator[Any]:
    """`batches`, each counted in `now` as it is handed out."""
    try:
        for batch in batches:
            now.handed += 1
            yield batch
    finally:  # the reading threads end with the pass, not when the collector finds them
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def fingerprint(dataset: Any) -> str:
    """What index i of `dataset` reads: its manifest's sha256, split, length and view."""
    said = json.dumps(_described(dataset), default=str)  # (numpy ints: their text)
    return hashlib.sha256(said.encode()).hexdigest()[:16]


def _described(ds: Any) -> list[Any]:
    if hasattr(ds, "datasets") and hasattr(ds, "weights"):  # MixedDataset: the sources, the plan
        parts = [_described(d) for d in ds.datasets]
        return ["mixed", parts, [float(w) for w in ds.weights], ds.seed, len(ds), ds.exhausted]
    if hasattr(ds, "dataset") and hasattr(ds, "indices"):  # torch's Subset: which of its samples
        picked = hashlib.sha256(np.asarray(ds.indices, dtype=np.int64).tobytes()).hexdigest()
        return ["subset", _described(ds.dataset), picked]
    sha = getattr(getattr(ds, "store", None), "_sha256", None)  # the manifest's bytes
    # What turns an index into a sample besides the manifest (windows, patches)
    view = [getattr(ds, k, None) for k in ("split", "block_size", "stride", "per_volume", "seed")]
    return [type(ds).__name__, len(ds), sha.hex() if sha else None, view]


def save(loader: Any) -> dict[str, Any]:
    """The loader's state: the next sample it would hand out, as a global position."""
    sampler = _sampler(loader)
    now: Pass | None = loader.progress
    if now is None or now.sets != sampler.sets:  # no pass, or the epoch set since: pending
        epoch, delivered = sampler.upcoming()[:2]
    elif now.done():  # after an epoch's last batch: the next epoch
        epoch, delivered = now.epoch + 1, 0
    else:
        epoch, delivered = now.epoch, now.position()
    return {
        "version": VERSION,
        "dataset": loader.fingerprint,
        "samples": sum(sampler.shard_sizes),
        "order": sampler.order,
        "seed": sampler.seed,
        "window": sampler.window,
        "epoch": epoch,
        "delivered": delivered,
        # The dataset's own epoch (mixture draws, crops, patch centres draw from it): a loop
        # that never sets it draws from 0 while the sampler's epoch advances
        "dataset_epoch": _dataset_epoch(loader.dataset),
    }


def _dataset_epoch(dataset: Any) -> int | None:
    epoch = getattr(dataset, "epoch", None)
    return epoch if isinstance(epoch, int) and hasattr(dataset, "set_epoch") else None


def load(loader: Any, state: Mapping[str, Any]) -> None:
    """Resume at `state`'s position: refused (ValueError, one line) for another dataset or
    order, or for ranks that passed different states."""
    sampler = _sampler(loader)
    _check_keys(state)
    ours = save(loader)
    if state["dataset"] != ours["dataset"] or state["samples"] != ours["samples"]:
        raise ValueError(
            f"this loader state was saved for another dataset (fingerprint {state['dataset']}, "
            f"{state['samples']} samples; this one: {ours['dataset']}, {ours['samples']}). "
            "HINT: load it into a loader of the dataset, split and view it was saved from"
        )
    said = ("order", "seed") + (("window",) if ours["order"] in WINDOWED else ())
    if any(state[k] != ours[k] for k in said):
        was = ", ".join(f"{k}={state[k]!r}" for k in said)
        now = ", ".join(f"{k}={ours[k]!r}" for k in said)
        raise ValueError(
            f"this loader state was saved reading {was}; this loader reads {now}. "
            f"HINT: make_loader(..., {was}) as when it was saved"
        )
    if sampler.num_replicas > 1 and dist.is_available() and dist.is_initialized():
        _agreed(state)
    sampler.resume(int(state["epoch"]), int(state["delivered"]))
    epoch = state.get("dataset_epoch")
    if isinstance(epoch, int) and _dataset_epoch(loader.dataset) is not None:
        loader.dataset.set_epoch(epoch)
    loader.progress = None


def _sampler(loader: Any) -> ShardSampler:
    sampler = loader.sampler
    if not isinstance(sampler, ShardSampler) or loader.batch_size is None:
        raise ValueError(
            f"a loader with a sampler of its own ({type(sampler).__name__}) keeps no state. "
            "HINT: let make_loader order the samples (order=, seed=, distributed=)"
        )
    return sampler


def _check_keys(state: Mapping[str, Any]) -> None:
    missing = [k for k in KEYS if k not in state] if isinstance(state, Mapping) else list(KEYS)
    if missing or state["version"] != VERSION:
        raise ValueError(
            f"not a loader state of version {VERSION} (missing {missing or 'nothing'}, "
            f"version {state.get('version') if isinstance(state, Mapping) else None}). "
            "HINT: pass what loader.state_dict() returned"
        )
    for k in ("epoch", "delivered", "samples", "seed"):
        if not isinstance(state[k], int) or isinstance(state[k], bool) or state[k] < 0:
            raise ValueError(f"loader state: {k} {state[k]!r} is not a count 0 or more")
    if state["delivered"] > state["samples"]:
        raise ValueError(
            f"loader state: delivered {state['delivered']} is past the epoch's "
            f"{state['samples']} samples. HINT: pass what loader.state_dict() returned"
        )


def _agreed(state: Mapping[str, Any]) -> None:
    """Refuse states that differ across ranks (one all_gather): rank 0's on each is the way."""
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, dict(state))
    differ = [r for r, s in enumerate(states) if s != states[0]]
    if differ:
        r = differ[0]
        raise ValueError(
            f"the ranks loaded different loader states (rank 0: epoch {states[0]['epoch']} at "
            f"{states[0]['delivered']}; rank {r}: epoch {states[r]['epoch']} at "
            f"{states[r]['delivered']}). HINT: save rank 0's loader.state_dict() and load that "
            "one on every rank"
        )
