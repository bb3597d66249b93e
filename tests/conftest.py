"""Shared fixtures: a small demo raw dataset and packs of it, made once per session.

Session-scoped folders are shared: a test that changes files works on a copy (`copy_dataset`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3server import s3_server  # noqa: F401  (the fixture `s3`: one server a session)

from prep.demo.images import make_demo
from prep.kinds.images.config import PackConfig
from prep.kinds.images.pack import pack
from prep.run.summary import RunSummary

PackFn = Callable[..., RunSummary]


def run_pack(src: Path, out: Path, **options: Any) -> RunSummary:
    """prep pack through the Python API, quietly, one job unless asked."""
    options.setdefault("jobs", 1)
    return pack(PackConfig(src=str(src), out=str(out), **options), show_progress=False)


def one_colour_share(image: np.ndarray) -> float:
    """The share of an (H, W, C) uint8 image's pixels in its most common colour."""
    flat = image.reshape(-1, image.shape[-1]).astype(np.uint32)
    if not len(flat):
        return 0.0
    keys = flat[:, 0] if flat.shape[1] == 1 else (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]
    return float(np.unique(keys, return_counts=True)[1].max() / len(keys))


@pytest.fixture(scope="session")
def raw_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tmp_path_factory.mktemp("demo") / "raw"
    make_demo(raw, count=24, seed=0, jobs=1, max_side=1024, show_progress=False)
    return raw


@pytest.fixture(scope="session")
def packed(raw_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo at 64 and 96 px with labels and masks, in shards of 8 (3 shards)."""
    out = tmp_path_factory.mktemp("packed") / "ds"
    run_pack(raw_demo / "images", out, sizes=[64, 96], masks=str(raw_demo / "masks"), shard_size=8)
    return out


@pytest.fixture
def pack_to() -> PackFn:
    return run_pack


@pytest.fixture
def copy_dataset(tmp_path: Path) -> Callable[[Path], Path]:
    def copy(src: Path) -> Path:
        dst = tmp_path / f"copy-{src.name}"
        shutil.copytree(src, dst)
        return dst

    return copy
