"""Rows 4 and 6b: reading packed shards through the loader against a copy of the same bytes
and against an ImageFolder-style PIL Dataset, and the loader workers' memory over epochs."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench import Row, info, timed, versus


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


def epoch_rate(loader: Any) -> float:
    n = 0
    start = time.perf_counter()
    for batch in loader:
        n += len(batch[0])
    return n / (time.perf_counter() - start)


def bench_load(raw: Path, work: Path, sample: int) -> list[Row]:
    import torch

    from loaders import ImageShardDataset, make_loader

    ds = ImageShardDataset(work / "p256", size=256, fields=("image", "label"))
    rows = []
    data_bytes = len(ds) * 256 * 256 * 3
    src = np.concatenate(
        [np.load(p, mmap_mode="r") for p in sorted((work / "p256").glob("image_256-*.npy"))]
    )
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm
    t_copy = min(timed(lambda: np.copyto(dst, src)) for _ in range(3))
    copy_rate = len(ds) / t_copy
    paths = sorted(str(p) for p in (raw / "images").rglob("*.*"))[:sample]
    folder = FolderDataset(paths, 256)
    for workers in (0, 2):
        loader = make_loader(ds, batch_size=256, shuffle=True, num_workers=workers)
        epoch_rate(loader)  # warm: page cache, worker start-up
        ours = max(epoch_rate(loader) for _ in range(2))
        ref_loader = torch.utils.data.DataLoader(
            folder, batch_size=64, shuffle=True, num_workers=workers
        )
        ref = epoch_rate(ref_loader)
        name = f"load, {workers} workers, vs"
        rows.append(versus(f"4a {name} ImageFolder+PIL", ours, ref, "img/s", ">= 20x"))
        rows.append(versus(f"4b {name} np.copyto", ours, copy_rate, "img/s", ">= 0.5x"))
    print(f"   (load: {len(ds)} samples, {data_bytes / 1e6:.0f} MB per epoch)", file=sys.stderr)
    rows.append(worker_batch_cost(src[:256]))
    return rows


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
    for _ in range(5):
        for _batch in loader:
            pass
        # Persistent workers: the same processes every epoch (a private attribute, bench only).
        per_epoch.append(sum(private_mb(w.pid) for w in loader._iterator._workers))
    first, last = per_epoch[0], per_epoch[-1]
    name = "6b 2 loader workers' private memory, epoch 5 vs 1"
    return Row(name, last, first, "MB", "<= 1.1x", last <= 1.1 * first + 5)  # 5 MB: noise
