"""Rows 4 and 6b: reading packed shards through the loader against a copy of the same bytes
into fresh batch buffers and against an ImageFolder-style PIL Dataset, the loader hiding behind
a training step, and the loader workers' memory over epochs."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from rows import Row, info, prep, timed, versus


class FolderDataset:
    """torchvision ImageFolder's work per sample: PIL decode, convert, resize, to tensor."""

    def __init__(self, paths: list[str], size: int):
        self.paths, self.size = paths, size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Any:
        import torch
        from PIL import Image

        with Image.open(self.paths[i]) as im:
            im = im.convert("RGB").resize((self.size, self.size), Image.Resampling.BILINEAR)
        return torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1), 0


def epoch_rate(loader: Any, step: float = 0.0) -> float:
    """Samples/s over one pass of `loader`, with a `step`-second GIL-free wait per batch (a
    training step waiting on the GPU)."""
    n = 0
    start = time.perf_counter()
    for batch in loader:
        n += len(batch[0])
        if step:
            time.sleep(step)
    return n / (time.perf_counter() - start)


def fresh_copy_rate(src: np.ndarray, labels: np.ndarray, batch: int, seed: int) -> float:
    """The reference reader: a shuffled epoch, each batch gathered into fresh numpy arrays."""
    import torch

    order = np.random.default_rng(seed).permutation(len(src))
    start = time.perf_counter()
    for a in range(0, len(src), batch):
        idx = order[a : a + batch]
        torch.from_numpy(np.take(src, idx, axis=0)), torch.from_numpy(labels[idx])
    return len(src) / (time.perf_counter() - start)


def sleeps(n: int, step: float) -> float:
    start = time.perf_counter()
    for _ in range(n):
        time.sleep(step)
    return time.perf_counter() - start


STEP = 0.02  # the overlap row's training step per batch of 256: slower than reading one


def bench_load(raw: Path, work: Path, sample: int, reps: int = 5) -> list[Row]:
    from loaders import ImageShardDataset, make_loader
    from loaders.read.loader import THREADS

    ds = ImageShardDataset(work / "p256", size=256, fields=("image", "label"))
    data_bytes = len(ds) * 256 * 256 * 3
    src = np.concatenate(
        [np.load(p, mmap_mode="r") for p in sorted((work / "p256").glob("image_256-*.npy"))]
    )
    default = f"default ({THREADS} thread{'s' if THREADS > 1 else ''})"
    loaders = {
        default: make_loader(ds, batch_size=256, shuffle=True),
        "0 threads": make_loader(ds, batch_size=256, shuffle=True, threads=0),
        "2 workers": make_loader(ds, batch_size=256, shuffle=True, num_workers=2),
    }
    best, ref, overlap, alone = _epochs(loaders, default, src, len(ds), reps)
    rows = [*_fresh_rows(best, ref, default), _overlap_row(overlap, alone)]
    rows += _pil_rows(raw, sample, best, default)
    busy = os.getloadavg()[0]  # 4d needs a free core: reading hides behind the step only then
    print(
        f"   (load: {len(ds)} samples, {data_bytes / 1e6:.0f} MB per epoch; load average "
        f"{busy:.1f} on {os.cpu_count()} cores)",
        file=sys.stderr,
    )
    rows.append(worker_batch_cost(src[:256]))
    rows.append(fresh_by_shards(raw, work, len(ds)))
    return rows


def _epochs(
    loaders: dict[str, Any], default: str, src: np.ndarray, n: int, reps: int
) -> tuple[dict[str, float], float, float, float]:
    """Interleaved repeats, best of each: every loader's img/s, the fresh copy's, and the
    seconds of an epoch with STEP steps and of the steps alone."""
    labels = np.zeros(len(src), np.int64)
    best = dict.fromkeys(loaders, 0.0)
    ref, overlap, alone = 0.0, float("inf"), float("inf")
    batches = len(loaders[default])
    for loader in loaders.values():
        epoch_rate(loader)  # warm: page cache, worker start-up, buffers
    for rep in range(reps):  # interleaved, best of each
        ref = max(ref, fresh_copy_rate(src, labels, 256, rep))
        for name, loader in loaders.items():
            best[name] = max(best[name], epoch_rate(loader))
        overlap = min(overlap, n / epoch_rate(loaders[default], STEP))
        alone = min(alone, sleeps(batches, STEP))
    return best, ref, overlap, alone


def _fresh_rows(best: dict[str, float], ref: float, default: str) -> list[Row]:
    """4b: each loader against a copy of the same bytes into fresh batches."""
    rows = []
    goals = {default: ">= 0.9x", "2 workers": ">= 0.6x"}
    for name, rate in best.items():
        row = f"4b load, {name}, vs fresh batches"
        goal = goals.get(name)
        note = "info (0 threads: the step waits)"
        rows.append(
            versus(row, rate, ref, "img/s", goal) if goal else info(row, rate, ref, "img/s", note)
        )
    return rows


def _overlap_row(overlap: float, alone: float) -> Row:
    """4d: an epoch with a training step a batch against the steps alone."""
    step_ms = f"{STEP * 1000:.0f} ms"
    return versus(
        f"4d epoch with {step_ms} steps vs the steps alone",
        1e3 * overlap,
        1e3 * alone,
        "ms",
        "<= 1.1x",
    )


def _pil_rows(raw: Path, sample: int, best: dict[str, float], default: str) -> list[Row]:
    """4a: the loader (threads, workers) against an ImageFolder-style PIL Dataset."""
    import torch

    paths = sorted(str(p) for p in (raw / "images").rglob("*.*"))[:sample]
    folder = FolderDataset(paths, 256)
    rows = []
    for name in (default, "2 workers"):
        workers = 2 if "workers" in name else 0
        ref_loader = torch.utils.data.DataLoader(
            folder, batch_size=64, shuffle=True, num_workers=workers
        )
        pil = epoch_rate(ref_loader)
        rows.append(
            versus(f"4a load, {name}, vs ImageFolder+PIL", best[name], pil, "img/s", ">= 20x")
        )
    return rows


def fresh_by_shards(raw: Path, work: Path, count: int, reps: int = 7) -> Row:
    """Row 4e: a fresh dataset and loader (0 workers), timed from their making over one epoch,
    reading p256 (the default shard count, 32) against the same photos packed in 2 shards."""
    from loaders import ImageShardDataset, make_loader

    two = work / "p256-2shards"
    common = ["--sizes", "256", "--overwrite", "--shard-size", str(-(-count // 2))]
    prep("pack", str(raw / "jpegs.csv"), str(two), *common)  # the list row 1b packed

    def fresh(root: Path) -> float:
        start = time.perf_counter()
        ds = ImageShardDataset(root, size=256, fields=("image", "label"))
        epoch_rate(make_loader(ds, batch_size=256, shuffle=True))
        return count / (time.perf_counter() - start)

    best = {"p256": 0.0, two.name: 0.0}
    for _ in range(reps):  # interleaved, best of each
        for name in best:
            best[name] = max(best[name], fresh(work / name))
    n32 = len(ImageShardDataset(work / "p256", size=256).shard_sizes)
    name = f"4e fresh loader, {n32} shards vs 2 (0 workers)"
    return versus(name, best["p256"], best[two.name], "img/s", ">= 0.95x")


def worker_batch_cost(batch: np.ndarray) -> Row:
    """Where a DataLoader worker's time goes for one batch: making fresh shared memory for it
    and faulting its pages in (what torch's worker protocol needs per batch), against the copy
    of the pixels into memory that is already there."""
    import torch

    out = np.empty_like(batch)
    np.copyto(out, batch)

    def fresh() -> None:
        storage = torch.UntypedStorage._new_shared(batch.nbytes)
        torch.empty(0, dtype=torch.uint8).set_(storage).numpy().fill(0)

    t_fresh = min(timed(fresh) for _ in range(5))
    t_copy = min(timed(lambda: np.copyto(out, batch)) for _ in range(5))
    name = "4c worker batch: fresh shared memory vs copy"
    return info(name, t_fresh * 1e3, t_copy * 1e3, "ms", "info (why 4b)")


def private_mb(pid: int) -> float:
    """Memory a process has written to itself (Private_Dirty, over all its mappings): what a
    worker costs beyond the page cache and the pages it shares with its parent. Not psutil's
    uss, which adds clean private pages: shard pages that only this worker has mapped."""
    return sum(m.private_dirty for m in psutil.Process(pid).memory_maps(grouped=True)) / 2**20


def bench_loader_memory(work: Path) -> Row:
    from loaders import ImageShardDataset, make_loader

    ds = ImageShardDataset(work / "p256", size=256, fields=("image", "label"))
    loader = make_loader(ds, batch_size=256, shuffle=True, num_workers=2)
    per_epoch = []
    for _ in range(8):
        for _batch in loader:
            pass
        # Persistent workers: the same processes every epoch (a private attribute, bench only).
        per_epoch.append(sum(private_mb(w.pid) for w in loader._iterator._workers))
    # Batches are handed out in the workers' segments (issue 40): each worker's ring fills to its
    # bound in the first epochs, as fast as the caller lets go (epoch 1 of 5 runs here: 247, 296
    # or 344 MB, epoch 3 on: 344). Growth after that would be a leak.
    first, last = per_epoch[3], per_epoch[-1]
    name = "6b 2 loader workers' private memory, epoch 8 vs 4"
    return Row(name, last, first, "MB", "<= 1.1x", last <= 1.1 * first + 5)  # 5 MB: noise
