"""The training examples run as documented, for ~20 steps (--limit) on tiny demo data, and learn:
every loss is finite and the last five steps' mean is below the first five's."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from conftest import run_pack

from examples import train_classifier, train_gpt, train_segmentation, train_volumes
from prep.demo.volumes import make_phantoms
from prep.kinds.text.config import TokenizeConfig
from prep.kinds.text.tokenize import tokenize
from prep.kinds.volumes.config import VolumeConfig
from prep.kinds.volumes.pack import volumes

Main = Callable[[Sequence[str]], list[float]]
FAST = ["--limit", "20", "--workers", "0", "--lr", "3e-3"]


@pytest.fixture(scope="module")
def small_images(raw_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's 24 demo images at 32 and 48 px, with masks."""
    out = tmp_path_factory.mktemp("ex") / "images"
    run_pack(raw_demo / "images", out, sizes=[32, 48], masks=str(raw_demo / "masks"))
    return out


@pytest.fixture(scope="module")
def tokens(raw_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ex") / "tokens"
    cfg = TokenizeConfig(
        src=str(raw_demo / "text"), out=str(out), tokenizer="char", val_fraction=0.2
    )
    tokenize(cfg, show_progress=False)
    return out


@pytest.fixture(scope="module")
def ct(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tmp_path_factory.mktemp("ex-ct")
    make_phantoms(raw, count=3, seed=0, side=32, dicom=False)
    out = raw / "packed"
    cfg = VolumeConfig(
        src=str(raw / "images"), out=str(out), labels=str(raw / "labels"), window="-1000,400"
    )
    volumes(cfg, show_progress=False)
    return out


def learns(main: Main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Runs 20 steps; checks the losses and the log; returns what was printed."""
    losses = main([*argv, *FAST])
    assert len(losses) == 20
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) < sum(losses[:5]), losses
    out = capsys.readouterr().out
    assert f"step 20 loss {losses[-1]:.3f}" in out
    assert "samples/s, data wait" in out
    return out


@pytest.mark.slow  # 20 training steps each: `make test-slow` (CI runs it)
def test_classifier_learns_shapes(small_images: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--data", str(small_images), "--epochs", "4", "--batch-size", "8", "--width", "8"]
    out = learns(train_classifier.main, argv, capsys)
    assert ", 32 px," in out and ", 48 px," in out  # progressive resizing over the packed sizes


def test_classifier_with_mixup_runs(small_images: Path) -> None:
    argv = ["--data", str(small_images), "--batch-size", "8", "--width", "8", "--mix", "cutmix"]
    losses = train_classifier.main([*argv, "--limit", "3", "--workers", "0"])
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)


@pytest.mark.slow  # 20 training steps each: `make test-slow` (CI runs it)
def test_segmentation_learns_masks(small_images: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--data", str(small_images), "--size", "32", "--batch-size", "8", "--width", "8"]
    learns(train_segmentation.main, argv, capsys)


@pytest.mark.slow  # 20 training steps each: `make test-slow` (CI runs it)
def test_gpt_learns_text(tokens: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = ["--layers", "2", "--heads", "2", "--embd", "32", "--block", "32"]
    learns(train_gpt.main, ["--data", str(tokens), "--batch-size", "8", *model], capsys)


@pytest.mark.slow  # 20 training steps each: `make test-slow` (CI runs it)
def test_volumes_learns_labels(ct: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--data", str(ct), "--patch", "16", "--batch-size", "2", "--width", "4"]
    learns(train_volumes.main, argv, capsys)
