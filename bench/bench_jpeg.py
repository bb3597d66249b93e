"""Rows 13: JPEG-encoded shards (issue 13) against the raw pack of the same photos, a bare
threaded decode of the same bytes with the same decoder, and a PIL decode per sample in a
2-worker DataLoader; random-resized against centre crops at load; FFCV's figures (the issue's,
measured on this machine: FFCV is not installable here) as info rows."""

from __future__ import annotations

import argparse
import io
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from bench_load import epoch_rate
from bench_pack import jpeg_list
from rows import Row, info, prep, versus

SIZE, BATCH = 256, 256
REPS = 5  # interleaved repeats at least: 2 shared cores make single epochs noisy
FFCV = {"reused, 2 threads": 6400.0, "fresh, 2 threads": 2060.0}  # issue 13's best of each


class PilBytes:
    """The reference Dataset: the same stored JPEG bytes, one PIL decode per sample."""

    def __init__(self, root: Path):
        self.root = root

    def _open(self) -> None:
        from loaders import ImageShardDataset

        ds = ImageShardDataset(self.root, size=SIZE, fields=("image",))
        self.parts = [ds.arrays.ragged(s, f"image_{SIZE}") for s in range(len(ds.shard_sizes))]
        self.starts = np.cumsum([0, *ds.shard_sizes])

    def __len__(self) -> int:
        if not hasattr(self, "parts"):
            self._open()
        return int(self.starts[-1])

    def __getitem__(self, i: int) -> Any:
        import torch
        from PIL import Image

        if not hasattr(self, "parts"):
            self._open()
        s = int(np.searchsorted(self.starts, i, side="right")) - 1
        data, off = self.parts[s]
        k = i - self.starts[s]
        with Image.open(io.BytesIO(data[off[k] : off[k + 1]].tobytes())) as im:
            arr = np.asarray(im.convert("RGB"))
        return torch.from_numpy(arr.copy()).permute(2, 0, 1), 0

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root}  # workers map the files themselves


def _all(root: Path) -> list[np.ndarray]:
    """Every JPEG sample of the pack, each copied out (the bare loop's input)."""
    ref = PilBytes(root)
    len(ref)
    return [np.array(d[o[k] : o[k + 1]]) for d, o in ref.parts for k in range(len(o) - 1)]


def bare_rate(blobs: list[np.ndarray], seed: int, threads: int = 2) -> float:
    """The limit: a shuffled pass decoding the same bytes with the same decoder (simplejpeg,
    as loaders.read.decode calls it) on `threads` threads, each into a buffer of its own."""
    import simplejpeg

    order = np.random.default_rng(seed).permutation(len(blobs))

    def chunk(idx: np.ndarray) -> None:
        buf = np.empty((SIZE, SIZE, 3), np.uint8)
        for i in idx:
            simplejpeg.decode_jpeg(blobs[i], "RGB", min_height=SIZE, min_width=SIZE, buffer=buf)

    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        for a in range(0, len(order), BATCH):
            part = order[a : a + BATCH]
            list(pool.map(chunk, np.array_split(part, threads)))
        return len(blobs) / (time.perf_counter() - start)


def _packs(work: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    lst, _ = jpeg_list(work / "raw", args.count)
    outs = (work / "j256-raw", work / "j256-q90")
    for out, codec in zip(outs, ("raw", "jpeg"), strict=True):
        common = ["-j", str(args.jobs), "--overwrite", "--sizes", str(SIZE), "--codec", codec]
        prep("pack", str(lst), str(out), *common)
    return outs


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live children (DataLoader workers)."""
    import psutil

    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def _disk(root: Path, prefix: str) -> int:
    return sum(p.stat().st_size for p in root.glob(f"{prefix}*"))


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    raw_pack, jpeg_pack = _packs(work, args)
    blobs = _all(jpeg_pack)
    best, cpu = _epochs(args, raw_pack, jpeg_pack, blobs)
    held = _held(jpeg_pack, len(blobs))
    return [
        *_goal_rows(raw_pack, jpeg_pack, best, cpu),
        *_info_rows(best, cpu, len(blobs), held),
    ]


def _epochs(
    args: argparse.Namespace, raw_pack: Path, jpeg_pack: Path, blobs: list[np.ndarray]
) -> tuple[dict[str, float], dict[str, float]]:
    """Each way's best img/s over interleaved repeats, and the CPU seconds of an epoch of some."""
    import torch

    from loaders import CenterCrop, ImageShardDataset, RandomResizedCrop, make_loader

    n = len(blobs)

    def fresh() -> float:  # a new dataset and loader, timed from their making
        start = time.perf_counter()
        ds = ImageShardDataset(jpeg_pack, size=SIZE, fields=("image", "label"))
        epoch_rate(make_loader(ds, batch_size=BATCH, shuffle=True))
        return n / (time.perf_counter() - start)

    def loader(crop: Any = None, root: Path = jpeg_pack, fast: bool = False) -> Any:
        fields = ("image", "label")
        ds = ImageShardDataset(root, size=SIZE, fields=fields, crop=crop, fast_dct=fast)
        return make_loader(ds, batch_size=BATCH, shuffle=True)

    loaders = {
        "jpeg": loader(),
        "raw": loader(root=raw_pack),
        "center": loader(CenterCrop(224)),
        "rrc": loader(RandomResizedCrop(224, seed=0)),
        "fast": loader(fast=True),  # fast_dct=True: the fast integer IDCT
    }
    pil = torch.utils.data.DataLoader(
        PilBytes(jpeg_pack), batch_size=BATCH, shuffle=True, num_workers=2, persistent_workers=True
    )
    for warm in (*loaders.values(), pil):
        epoch_rate(warm)  # page cache, worker start-up, buffers
    best: dict[str, float] = {}
    cpu = dict.fromkeys(("center", "rrc", "jpeg", "pil"), float("inf"))
    for rep in range(args.reps if args.smoke else max(REPS, args.reps)):  # interleaved, best
        rates = {k: epoch_rate(v) for k, v in loaders.items()}
        rates |= {"bare": bare_rate(blobs, rep), "pil": epoch_rate(pil), "fresh": fresh()}
        best = {k: max(best.get(k, 0.0), r) for k, r in rates.items()}
        for k in cpu:  # CPU seconds of an epoch (all threads and workers): a cost that the
            start = cpu_seconds()  # neighbours on shared cores disturb less than wall time
            epoch_rate(pil if k == "pil" else loaders[k])
            cpu[k] = min(cpu[k], cpu_seconds() - start)
    return best, cpu


def _held(jpeg_pack: Path, n: int) -> int:
    """Bytes the JPEG pack holds in RAM with in_memory=True (said on stderr with the run's size)."""
    from loaders import ImageShardDataset

    ram = ImageShardDataset(jpeg_pack, size=SIZE, fields=("image", "label"), in_memory=True)
    held = ram._memory[f"image_{SIZE}"].numel() + ram._memory[f"image_{SIZE}.offsets"].numel() * 8
    print(
        f"   (jpeg: {n} samples of {SIZE}px, batch {BATCH}, {held / 1e6:.1f} MB in RAM)",
        file=sys.stderr,
    )
    return int(held)


def _goal_rows(
    raw_pack: Path, jpeg_pack: Path, best: dict[str, float], cpu: dict[str, float]
) -> list[Row]:
    """13a-13d: disk, load against the bare decode and PIL, and the crops' CPU cost."""
    disk_raw, disk_jpeg = _disk(raw_pack, f"image_{SIZE}"), _disk(jpeg_pack, f"image_{SIZE}")
    return [
        versus(
            "13a disk q90 jpeg vs raw pack, 256px",
            disk_jpeg / 1e6,
            disk_raw / 1e6,
            "MB",
            "<= 0.2x",
        ),
        versus(
            "13b load jpeg 256px vs bare 2-thread decode",
            best["jpeg"],
            best["bare"],
            "img/s",
            ">= 0.95x",
        ),
        versus(
            "13j load jpeg fast_dct vs bare 2-thread decode",
            best["fast"],
            best["bare"],
            "img/s",
            ">= 1.1x",
        ),
        versus(
            "13c load jpeg 256px vs PIL in 2 workers", best["jpeg"], best["pil"], "img/s", ">= 3x"
        ),
        versus(
            "13d RandomResizedCrop vs CenterCrop, CPU s",
            cpu["rrc"],
            cpu["center"],
            "s",
            "<= 1.2x",
        ),
    ]


def _info_rows(best: dict[str, float], cpu: dict[str, float], n: int, held: int) -> list[Row]:
    """13e-13i: raw against jpeg, PIL's CPU per image, RAM, and FFCV's figures."""
    out = [
        info("13e load raw vs jpeg (img/s)", best["raw"], best["jpeg"], "img/s", "info"),
        info(
            "13i CPU us/img, PIL in 2 workers vs ours",
            cpu["pil"] / n * 1e6,
            cpu["jpeg"] / n * 1e6,
            "us",
            "info (13c's why)",
        ),
        info(
            "13f in_memory RAM jpeg vs raw pixels",
            held / 1e6,
            n * SIZE * SIZE * 3 / 1e6,
            "MB",
            "info",
        ),
    ]
    for row, (name, ref), ours in zip(
        "gh", FFCV.items(), (best["jpeg"], best["fresh"]), strict=True
    ):
        out.append(info(f"13{row} jpeg {name} vs FFCV (issue)", ours, ref, "img/s", "info (issue)"))
    return out
