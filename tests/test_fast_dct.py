"""fast_dct=True: libjpeg-turbo's fast integer IDCT and plain chroma upsampling, whole images and
crops (the ROI extension's box too), against the accurate decode of the same shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import torch

import loaders.read.decode as decode
from loaders import CenterCrop, ImageShardDataset, RandomResizedCrop
from tests.conftest import run_pack
from tests.test_jpeg import _photos


@pytest.fixture(scope="module")
def q90(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fast")
    out = root / "ds"
    run_pack(_photos(root / "src", 4), out, sizes=[48], codec="jpeg", shard_size=3)
    return out


def _batch(root: Path, **kw: object) -> torch.Tensor:
    ds = ImageShardDataset(root, fields=("image",), **kw)
    return ds.__getitems__(list(range(len(ds)))).tensors[0].float()


@pytest.mark.parametrize("crop", [None, CenterCrop(40), RandomResizedCrop(32, seed=3)])
def test_fast_dct_is_close_to_the_accurate_decode_but_not_it(q90: Path, crop: object) -> None:
    accurate, fast = _batch(q90, crop=crop), _batch(q90, crop=crop, fast_dct=True)
    assert accurate.shape == fast.shape
    error = (accurate - fast).abs()
    assert 0 < error.mean().item() < 3, error.mean()  # another decode, within a few levels


def test_fast_box_is_the_slice_of_a_fast_whole_decode(q90: Path) -> None:
    if decode._roi is None:
        pytest.skip("loaders._jpegroi is not built")
    ds = ImageShardDataset(q90, fields=("image",))
    data, off = ds.arrays.ragged(0, "image_48")
    blob = np.array(data[off[0] : off[1]])
    h, w = simplejpeg.decode_jpeg_header(blob.tobytes())[:2]
    whole = simplejpeg.decode_jpeg(blob, "RGB", fastdct=True, fastupsample=True)
    box = decode.decode_region(blob, (h, w), 1, (5, 7, 20, 30), 3, fast=True).copy()  # scratch
    np.testing.assert_array_equal(box, whole[5:25, 7:37])
    accurate = decode.decode_region(blob, (h, w), 1, (5, 7, 20, 30), 3)
    assert not np.array_equal(box, accurate)
