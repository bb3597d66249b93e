"""examples/train_detection.py learns: 20 steps on a small COCO import of prep's demo images
(their shapes' boxes), augmented by the dataset's box-aware transforms, the loss falling."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from examples import train_detection
from prep.demo.images import make_demo
from prep.kinds.importers.coco import import_coco
from prep.kinds.importers.config import CocoConfig


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 demo images (at most 160 px) imported at 64 px, filled to square."""
    raw = tmp_path_factory.mktemp("det") / "raw"
    make_demo(raw, count=16, seed=0, jobs=1, max_side=160, show_progress=False)
    out = raw.parent / "coco"
    cfg = CocoConfig(
        src=str(raw / "coco.json"), images=str(raw / "images"), out=str(out), sizes=[64], jobs=1
    )
    import_coco(cfg, show_progress=False)
    return out


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch on one thread for this tiny model: on a busy 2-core machine, two threads wait on
    each other at every op (20 steps took 19 s of wall time for 0.4 s on one thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_thread")
def test_detector_loss_falls(coco: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--data", str(coco), "--batch-size", "8", "--width", "16", "--lr", "3e-3"]
    losses = train_detection.main([*argv, "--limit", "20", "--workers", "0"])
    assert len(losses) == 20 and all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
    out = capsys.readouterr().out
    assert f"step 20 loss {losses[-1]:.3f}" in out and "val recall@10" in out
