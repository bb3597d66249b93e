"""prep tune: time the real loader (`make_loader` over `ImageShardDataset`, shuffled as in
training) with reading threads and with worker processes, and recommend a setting
(TuneResult.recommended). Each setting runs for `seconds` after its first batch: persistent
workers pay their start-up once per training run. torch is imported here, not by `prep --help`."""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from loaders.fields import Image, declared
from loaders.format import Manifest, read_manifest
from prep.inspect.tuned import TuneResult, TuneRow, check_plot, plot
from prep.run.errors import PrepError
from prep.run.parallel import progress

__all__ = ["TuneResult", "TuneRow", "check_plot", "plot", "tune"]

PREFETCH = 2  # make_loader's default prefetch_factor
TRAIN_FIELDS = ("image", "label", "mask")  # what a training loop reads; orig_size is for eval


def image_dataset(root: Path, size: int | None) -> tuple[Manifest, int]:
    """The manifest of a dataset ImageShardDataset reads (an image field `image`) and the
    stored size to time (default: the smallest)."""
    m = read_manifest(root)
    if not isinstance(declared(m).get("image"), Image):
        raise PrepError(
            f"{root} has no image field 'image': prep tune times ImageShardDataset. "
            "HINT: pass a dataset of prep pack"
        )
    sizes = m.sizes()
    size = min(sizes) if size is None else size
    if size not in sizes:
        raise PrepError(f"{root} has no size {size}. HINT: --size one of {sizes}")
    return m, size


def worker_counts(cores: int) -> list[int]:
    """0, 1, 2, 3, 4, then 6, 8, 12, 16, 24, ... (2^k and 1.5 x 2^k) below `cores`, and `cores`:
    every count on a small machine, a dozen settings on a big one.

    >>> worker_counts(2), worker_counts(20)
    ([0, 1, 2], [0, 1, 2, 3, 4, 6, 8, 12, 16, 20])
    """
    counts = [n for n in range(5) if n <= cores]
    n = 4
    while n < cores:
        n = n * 3 // 2 if n & (n - 1) == 0 else n * 4 // 3  # 4 -> 6 -> 8 -> 12 -> 16 ...
        counts.append(min(n, cores))
    return counts


def batch_bytes(m: Manifest, size: int, fields: Sequence[str], batch_size: int) -> int:
    """Bytes of one batch as the loader returns it (read_dtype: labels widen to int64)."""
    per_sample = 0
    for f in fields:
        spec = m.arrays[m.array_for(f, size)]
        itemsize = np.dtype(declared(m)[f].read_dtype(spec)).itemsize
        per_sample += int(np.prod(spec.shape, dtype=np.int64)) * itemsize
    return per_sample * batch_size


def thread_counts(cores: int) -> list[int]:
    """Reading threads to try: 1, 2, 4, ... up to the cores, at most 8 (a copy per batch
    saturates memory bandwidth long before).

    >>> thread_counts(1), thread_counts(2), thread_counts(64)
    ([1], [1, 2], [1, 2, 4, 8])
    """
    return [t for t in (1, 2, 4, 8) if t <= max(1, cores)]


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its live children, the DataLoader
    workers: psutil reads them while they run, where os.times counts only waited-for children."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:  # exited meanwhile
            continue
        total += t.user + t.system
    return total


def _forever(loader: Any) -> Generator[Any, None, None]:
    while True:
        yield from loader  # a new epoch each time; persistent workers stay up


def measure(
    dataset: Any,
    batch_size: int,
    workers: int,
    prefetch: int,
    seconds: float,
    nbytes: int,
    threads: int = 0,
) -> TuneRow:
    """One setting: samples/s and CPU use over `seconds` after the first batch; `nbytes`: the
    bytes of a batch, for the RAM in flight (W x prefetch_factor batches for W workers, T + 1
    for T threads: loaders.read.prefetch)."""
    from torch.utils.data import RandomSampler

    from loaders import make_loader

    extra: dict[str, Any] = {"prefetch_factor": prefetch} if workers > 0 else {}
    # Shuffled as in training, in one long epoch of many permutations: a small dataset would
    # otherwise time the epoch restarts (a pause of every worker), which a real epoch of
    # thousands of batches does not notice.
    epoch = max(len(dataset), batch_size) * 1000
    extra["sampler"] = RandomSampler(dataset, num_samples=epoch)
    loader = make_loader(dataset, batch_size, num_workers=workers, threads=threads, **extra)
    batches = _forever(loader)
    try:
        next(batches)  # workers started, first batch out
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        samples, elapsed = 0, 0.0
        while elapsed < seconds:
            samples += len(next(batches)[0])
            elapsed = time.perf_counter() - t0
        cpu1 = cpu_seconds()
    finally:
        batches.close()
        del loader  # shuts persistent workers down
    cpu = 100.0 * (cpu1 - cpu0) / elapsed
    n = workers * prefetch if workers > 0 else threads + 1  # batches in flight
    return TuneRow(workers, samples / elapsed, cpu, n, n * nbytes, threads)


def tune(
    root: Path,
    size: int | None = None,
    batch_size: int = 64,
    seconds: float = 3.0,
    workers: Sequence[int] | None = None,
    prefetch_factor: int = PREFETCH,
    limit: int | None = None,
    show_progress: bool = True,
    threads: Sequence[int] | None = None,
) -> TuneResult:
    """Time the loader at each thread count, then at each worker count (0: neither); defaults
    for this machine's cores."""
    m, size = image_dataset(root, size)  # checked before torch loads (seconds)
    if batch_size < 1 or prefetch_factor < 1 or seconds <= 0:
        raise PrepError("--batch-size, --prefetch-factor and --seconds must be positive")
    if limit is not None and limit < 1:
        raise PrepError("--limit must be at least 1")
    from torch.utils.data import Subset

    from loaders import CenterCrop, ImageShardDataset

    cores = os.cpu_count() or 1
    counts = sorted(set(workers)) if workers else worker_counts(cores)
    tcounts = sorted(set(threads)) if threads is not None else thread_counts(cores)
    if counts[0] < 0 or (tcounts and tcounts[0] < 0):
        raise PrepError(f"worker counts {counts} and thread counts {tcounts} must be 0 or more")
    settings = [(0, t) for t in tcounts if t > 0] + [(w, 0) for w in counts]
    fields = tuple(f for f in TRAIN_FIELDS if f in m.fields)
    keep = declared(m)["image"].mode == "keep"  # type: ignore[attr-defined]  # one shape a batch
    crop = CenterCrop(size, ratio=1.0) if keep else None
    ds: Any = ImageShardDataset(root, size=size, fields=fields, crop=crop)
    if limit is not None:
        ds = Subset(ds, range(min(limit, len(ds))))
    if len(ds) == 0:
        raise PrepError(f"{root} holds no samples to load")
    nbytes = batch_bytes(m, size, fields, batch_size)
    result = TuneResult(root, size, batch_size, prefetch_factor, fields, len(ds), nbytes, keep=keep)
    bar = progress(len(settings), "setting", f"tune {root.name}") if show_progress else None
    try:
        for w, t in settings:
            result.rows.append(measure(ds, batch_size, w, prefetch_factor, seconds, nbytes, t))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return result
