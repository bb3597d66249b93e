"""Per-channel pixel statistics in the image manifest, as numpy computes them over the stored
pixels, and Normalize.from_dataset that reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from loaders import ImageShardDataset, MixedDataset, Normalize
from loaders.format import FormatError, read_manifest


def stored_pixels(root: Path, size: int) -> np.ndarray:
    ds = ImageShardDataset(root, size=size, fields=("image",))
    images = ds.__getitems__(list(range(len(ds)))).tensors[0]  # (B, C, H, W)
    return images.permute(1, 0, 2, 3).reshape(images.shape[1], -1).numpy().astype(np.float64)


def test_stats_equal_numpy_over_the_stored_pixels(packed: Path) -> None:
    stats = read_manifest(packed).extra["stats"]["image"]  # the image field's
    assert stats["split"] is None and set(stats["sizes"]) == {"64", "96"}  # no splits: all
    for size in (64, 96):
        pixels = stored_pixels(packed, size)
        at = stats["sizes"][str(size)]
        assert at["pixels"] == pixels.shape[1]
        assert np.allclose(at["mean"], pixels.mean(axis=1), atol=1e-3)
        assert np.allclose(at["std"], pixels.std(axis=1), atol=1e-3)


def test_gray_keep_mode_and_the_train_split(raw_demo: Path, pack_to: Any, tmp_path: Path) -> None:
    out = tmp_path / "gray"
    pack_to(raw_demo / "images", out, sizes=[32], gray=True, mode="keep", shard_size=10)
    at = read_manifest(out).extra["stats"]["image"]["sizes"]["32"]
    # mode keep stores each shard's pixels ragged: one flat array of every sample's, gray here
    flat = np.concatenate([np.load(f).ravel() for f in sorted(out.glob("image_32-0*.npy"))])
    assert at["pixels"] == flat.size and len(at["mean"]) == 1
    assert np.allclose([at["mean"][0], at["std"][0]], [flat.mean(), flat.std()], atol=1e-3)
    from prep.media.image.geometry import combine

    def record(split: str | None, pixels: int, total: int, sumsq: int) -> dict[str, Any]:
        sums = {"32": {"pixels": pixels, "sum": [total], "sumsq": [sumsq]}}
        return {"shard": {"split": split}, "stats": sums}

    got = combine([record("train", 2, 2, 2), record("val", 2, 510, 2 * 255**2)])
    assert got == {"split": "train", "sizes": {"32": {"mean": [1.0], "std": [0.0], "pixels": 2}}}
    assert combine([record(None, 1, 0, 0), {"shard": {}}]) is None  # a shard without sums


def test_normalize_from_dataset(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=96, fields=("image",))
    norm = Normalize.from_dataset(ds)
    pixels = stored_pixels(packed, 96)
    assert np.allclose(norm.mean.flatten().numpy(), pixels.mean(axis=1), atol=1e-3)
    x = norm(ds.__getitems__(list(range(len(ds)))).tensors[0])
    assert torch.allclose(x.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-3)
    assert torch.allclose(x.std(dim=(0, 2, 3)), torch.ones(3), atol=1e-3)
    assert torch.equal(Normalize.from_dataset(ds, size=64).mean, _mean(packed, 64))
    small = ImageShardDataset(packed, size=64, fields=("image",))
    mixed = Normalize.from_dataset(MixedDataset([ds, small], [0.25, 0.75], fields=("image",)))
    small_pixels = stored_pixels(packed, 64)  # a pixel of the mixture: a source by weight, then
    both = np.concatenate([pixels, small_pixels], axis=1)  # one of its pixels
    n, m = pixels.shape[1], small_pixels.shape[1]
    p = np.repeat([0.25 / n, 0.75 / m], [n, m])
    mean = (both * p).sum(axis=1)
    std = np.sqrt((both**2 * p).sum(axis=1) - mean**2)
    assert np.allclose(mixed.mean.flatten().numpy(), mean, atol=1e-3)
    assert np.allclose(mixed.std.flatten().numpy(), std, atol=1e-3)


def _mean(root: Path, size: int) -> torch.Tensor:
    mean = read_manifest(root).extra["stats"]["image"]["sizes"][str(size)]["mean"]
    return torch.tensor(mean).view(-1, 1, 1)


def test_older_datasets_say_to_repack(packed: Path, copy_dataset: Any) -> None:
    old = copy_dataset(packed)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["extra"]["stats"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    ds = ImageShardDataset(old, size=64)
    with pytest.raises(ValueError, match=r"no pixel statistics.*repack.*mean"):
        Normalize.from_dataset(ds)
    with pytest.raises(ValueError, match="not 48"):
        Normalize.from_dataset(ImageShardDataset(packed, size=64), size=48)
    manifest["extra"]["stats"] = {"image": {"sizes": {"64": {"mean": [1, 2, 3], "std": "x"}}}}
    (old / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=r"extra\.stats\.image at '64' is not a mean and std"):
        Normalize.from_dataset(ImageShardDataset(old, size=64))  # refused at open (issue 34)
