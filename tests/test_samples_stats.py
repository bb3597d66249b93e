"""Per-channel pixel statistics of a samples dataset's image fields (an imported COCO dataset
here), as numpy computes them over the stored pixels: mode fill and keep stored raw, and JPEG
(whose statistics are of the pixels before encoding: equal to the raw import's); `prep verify`
accepts them and refuses a damaged entry; Normalize.from_dataset reads them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from typer.testing import CliRunner

from loaders import Normalize, SampleDataset
from loaders.format import read_manifest
from prep.cli.main import app

SHAPES = [(70, 50), (40, 90), (64, 64), (33, 47), (120, 80)]  # (w, h)


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five noisy RGB images (one gray, stored as RGB) with a box each, as COCO instances."""
    root = tmp_path_factory.mktemp("coco")
    rng = np.random.default_rng(0)
    images, anns = [], []
    for i, (w, h) in enumerate(SHAPES):
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        img = PILImage.fromarray(pixels)
        (img.convert("L") if i == 3 else img).save(root / f"{i}.png")
        images.append({"id": i + 1, "file_name": f"{i}.png", "width": w, "height": h})
        anns.append({"id": i + 1, "image_id": i + 1, "category_id": 1, "bbox": [1, 1, 10, 10]})
    coco = {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "thing"}]}
    (root / "instances.json").write_text(json.dumps(coco))
    return root


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def imported(coco: Path, out: Path, *options: str) -> Path:
    src = str(coco / "instances.json")
    run("import", "coco", src, str(coco), str(out), "-q", "-j", "2", "--shard-size", "2", *options)
    return out


def _close(at: dict[str, object], pixels: np.ndarray) -> None:
    """`at` (one size's entry) against numpy over (C, N) pixels."""
    assert at["pixels"] == pixels.shape[1]
    assert np.allclose(at["mean"], pixels.mean(axis=1), atol=1e-3)  # type: ignore[arg-type]
    assert np.allclose(at["std"], pixels.std(axis=1), atol=1e-3)  # type: ignore[arg-type]


def test_fill_raw_and_jpeg_stats_and_normalize(coco: Path, tmp_path: Path) -> None:
    out = imported(coco, tmp_path / "raw", "--sizes", "32,48", "--mode", "fill", "--codec", "raw")
    stats = read_manifest(out).extra["stats"]
    assert list(stats) == ["image"] and stats["image"]["split"] is None  # no splits: all
    for size in (32, 48):
        ds = SampleDataset(out, fields=("image",), size=size)
        images = ds.__getitems__(list(range(len(ds))))["image"]  # (B, C, H, W) uint8
        pixels = images.permute(1, 0, 2, 3).reshape(3, -1).numpy().astype(np.float64)
        _close(stats["image"]["sizes"][str(size)], pixels)
    norm = Normalize.from_dataset(SampleDataset(out, fields=("image", "boxes"), size=48))
    x = norm(images)
    assert torch.allclose(x.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-3)
    assert torch.allclose(x.std(dim=(0, 2, 3), unbiased=False), torch.ones(3), atol=1e-3)
    small = Normalize.from_dataset(ds, size=32, field="image")
    assert small.mean.flatten().tolist() == pytest.approx(stats["image"]["sizes"]["32"]["mean"])
    with pytest.raises(ValueError, match="no image field 'boxes'"):
        Normalize.from_dataset(ds, field="boxes")
    jpeg = imported(coco, tmp_path / "jpeg", "--sizes", "32,48", "--codec", "jpeg")
    assert read_manifest(jpeg).extra["stats"] == stats  # the pixels before encoding
    assert "ok" in run("verify", str(jpeg)).lower()


def test_keep_mode_and_a_damaged_entry(coco: Path, tmp_path: Path) -> None:
    out = imported(coco, tmp_path / "keep", "--sizes", "64", "--mode", "keep", "--codec", "raw")
    # mode keep stores each shard's pixels ragged: one flat array of every sample's, HWC
    flat = np.concatenate([np.load(f).ravel() for f in sorted(out.glob("image_64-0*.npy"))])
    _close(read_manifest(out).extra["stats"]["image"]["sizes"]["64"], flat.reshape(-1, 3).T)
    run("verify", str(out))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["extra"]["stats"]["image"]["sizes"]["64"]["mean"] = [1.0]  # one channel of three
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(app, ["verify", str(out)])
    assert result.exit_code != 0 and "extra.stats.image at '64'" in result.output, result.output
