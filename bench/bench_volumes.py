"""Rows 9a-9c: `prep volumes` + PatchDataset against a MONAI-style per-sample pipeline.

Four CT-like phantoms of SIDE^3 voxels (1 mm, stored LPS; the smoke run: 48^3) as .nii.gz,
packed once with --spacing 1.5 (int16 HU, labels). The baseline does per sample what MONAI's
LoadImage -> Orientation -> Spacing -> RandSpatialCrop chain does: nibabel load, closest
canonical (RAS), scipy trilinear zoom to 1.5 mm, a random crop, in a 2-worker DataLoader.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_load import private_mb
from rows import PREP, Row, info, run, versus

SIDE, PATCH, VOLUMES, SPACING = 256, 96, 4, 1.5
BATCH = 2


def make_scans(raw: Path, side: int) -> None:
    """The phantoms as .nii.gz with labels, once (cached under bench/out/)."""
    import nibabel as nib

    from prep.demo.volumes import phantom

    done = raw / ".done"
    if done.is_file():
        return
    for sub in ("images", "labels"):
        (raw / sub).mkdir(parents=True, exist_ok=True)
    affine = np.diag([-1.0, -1.0, 1.0, 1.0])  # 1 mm voxels, stored LPS
    for i in range(VOLUMES):
        img, label = phantom((side, side, side), np.random.default_rng([7, i]))
        nib.save(nib.Nifti1Image(img, affine), raw / "images" / f"ct_{i}.nii.gz")
        nib.save(nib.Nifti1Image(label, affine), raw / "labels" / f"ct_{i}.nii.gz")
    done.touch()


class MonaiStyle:
    """Per sample: load the .nii.gz, reorient to RAS, resample to 1.5 mm, crop a patch."""

    def __init__(self, raw: Path, patch: int, per_volume: int):
        self.paths = sorted((raw / "images").glob("*.nii.gz"))
        self.patch, self.per_volume = patch, per_volume

    def __len__(self) -> int:
        return len(self.paths) * self.per_volume

    def __getitem__(self, i: int) -> Any:
        import nibabel as nib
        import torch
        from scipy.ndimage import zoom

        path = self.paths[i // self.per_volume]
        img = nib.as_closest_canonical(nib.load(path))
        data = img.get_fdata(dtype=np.float32)
        data = zoom(data, np.asarray(img.header.get_zooms()[:3]) / SPACING, order=1)
        label = nib.as_closest_canonical(nib.load(str(path).replace("images", "labels")))
        seg = zoom(
            np.asarray(label.dataobj), np.asarray(img.header.get_zooms()[:3]) / SPACING, order=0
        )
        rng = np.random.default_rng(i)
        s = [int(rng.integers(0, max(n - self.patch, 0) + 1)) for n in data.shape]
        box = tuple(slice(a, a + self.patch) for a in s)
        return torch.from_numpy(data[box][None].copy()), torch.from_numpy(seg[box][None].copy())


def rate(loader: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in loader:
        pass
    return n / (time.perf_counter() - start)


def patch_epoch(ds: Any) -> tuple[float, float]:
    """Patches/s of a warm epoch (workers started, pages cached, as the baseline's files are)
    and the most private memory a worker gained during it (MB)."""
    from loaders import make_loader

    loader = make_loader(ds, batch_size=BATCH, shuffle=True, num_workers=2)
    rate(loader, len(ds))
    workers = loader._iterator._workers  # type: ignore[attr-defined]  (persistent: bench only)
    before = [private_mb(w.pid) for w in workers]
    ds.set_epoch(1)
    ours = rate(loader, len(ds))
    return ours, max(private_mb(w.pid) - b for w, b in zip(workers, before, strict=True))


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from torch.utils.data import DataLoader

    from loaders import PatchDataset

    side, patch = (48, 24) if args.smoke else (SIDE, PATCH)
    raw, out = work / "volumes" / f"raw{side}", work / "volumes" / f"packed{side}"
    make_scans(raw, side)
    start = time.perf_counter()
    run([*PREP, "volumes", str(raw / "images"), str(out), "--labels", str(raw / "labels"),
         "--spacing", f"{SPACING},{SPACING},{SPACING}", "--overwrite", "-q"])  # fmt: skip
    pack_s = time.perf_counter() - start

    ds = PatchDataset(out, patch=(patch,) * 3, per_volume=32, foreground=0.33)
    ours, growth = patch_epoch(ds)

    base = MonaiStyle(raw, patch, per_volume=2)
    ref = rate(DataLoader(base, batch_size=BATCH, num_workers=2), len(base))

    packed = sum(f.stat().st_size for f in out.glob("*.npy"))
    voxels = sum(int(np.prod(ds.shape(v))) for v in range(VOLUMES))
    patch_mb = patch**3 * 3 / 2**20  # int16 image + uint8 label
    return [
        versus(
            f"12a patches/s {patch}^3, 2 workers, vs nibabel+resample",
            ours,
            ref,
            "patch/s",
            ">= 20x",
        ),
        versus(
            "12b packed int16 + labels vs a float32 cache",
            packed / 1e6,
            voxels * 8 / 1e6,
            "MB",
            "<= 0.5x",
        ),
        Row(
            "12c patch epoch: worker private memory growth, vs one patch",
            growth,
            patch_mb,
            "MB",
            "<= 4 patches",
            growth <= 4 * patch_mb + 2,
        ),  # 2 MB: noise
        info(
            "12d prep volumes once, per scan, vs the baseline per patch",
            pack_s / VOLUMES,
            1 / ref,
            "s",
            "info (one-off)",
        ),
    ]
