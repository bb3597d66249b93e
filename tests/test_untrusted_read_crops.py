"""A load-time crop= and a transforms= pipeline keep and drop the same boxes (issue 34 item 2:
crop= kept the boxes it cut away, as [0, 0, 0, 0] with their labels), with their labels,
keypoints and instance masks in step, for every ragged policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import prep
from loaders import CenterCrop, RandomResizedCrop, SampleDataset
from loaders import transforms as T
from prep.fields import Array, Boxes, Image, Instances, Keypoints

CORNER, MIDDLE = 7, 3  # the labels of each image's two boxes


def corner_sample(i: int) -> dict[str, Any]:
    """A landscape or portrait image with a small box in its top-left corner (which a centred
    crop cuts away) and one in its middle."""
    h, w = (80, 120) if i % 2 == 0 else (120, 80)
    middle = [w / 2 - 10, h / 2 - 10, w / 2 + 10, h / 2 + 10]
    boxes = np.array([[0, 0, 8, 8], middle], np.float32)
    return {
        "image": np.full((h, w, 3), 40 * i, np.uint8),
        "boxes": boxes,
        "labels": np.array([CORNER, MIDDLE], np.int64),
    }


def test_a_load_crop_drops_the_corner_boxes_it_cuts_away(tmp_path: Path) -> None:
    """The issue's case: keep mode at 96 px, CenterCrop(64, ratio=0.875)."""
    fields = {
        "image": Image(sizes=(96,), mode="keep"),
        "boxes": Boxes("image"),
        "labels": Array("int64", (None,)),
    }
    prep.pack_samples(corner_sample, range(4), tmp_path / "ds", fields, show_progress=False)
    ds = SampleDataset(
        tmp_path / "ds",
        fields=("image", "boxes", "labels"),
        size=96,
        crop=CenterCrop(64, ratio=0.875),
    )
    b = ds.__getitems__([0, 1, 2, 3])
    assert b["boxes_len"].tolist() == [1, 1, 1, 1] and b["labels_len"].tolist() == [1, 1, 1, 1]
    assert b["labels"].tolist() == [[MIDDLE]] * 4
    for i in range(4):
        h, w = (64, 96) if i % 2 == 0 else (96, 64)  # stored: the longer side at 96
        side = round(min(h, w) * 224 / 256)
        top, left, scale = (h - side) // 2, (w - side) // 2, 64 / side
        x0, y0, x1, y1 = np.array(corner_sample(i)["boxes"][1]) * 96 / 120
        want = [(x0 - left) * scale, (y0 - top) * scale, (x1 - left) * scale, (y1 - top) * scale]
        np.testing.assert_allclose(b["boxes"][i, 0].numpy(), want, atol=1e-4)
    listed = SampleDataset(
        tmp_path / "ds", ("boxes", "labels"), crop=CenterCrop(64, ratio=0.875), ragged="list"
    ).__getitems__([0, 1])
    assert [t.tolist() for t in listed["labels"]] == [[MIDDLE], [MIDDLE]]


def scene(i: int) -> dict[str, Any]:
    """A 48 px image with boxes inside, across and outside its centre, each with a label, two
    keypoints and an instance mask."""
    rng = np.random.default_rng(i)
    boxes = np.array(
        [
            [0, 0, 6, 6],
            [2, 20, 30, 28],
            [14, 14, 34, 34],
            [40, 0, 48, 10 + i],
            [11.5, 12, 12.3, 30],
        ],
        np.float32,
    )[: 2 + i % 4]
    stack = np.zeros((len(boxes), 48, 48), np.uint8)
    for j, (x0, y0, x1, y1) in enumerate(boxes.astype(int)):
        stack[j, y0 : y1 + 1, x0 : x1 + 1] = 1
    corners = boxes.reshape(-1, 2, 2)
    points = np.concatenate([corners, np.full((len(boxes), 2, 1), 2, np.float32)], -1)
    return {
        "image": (rng.random((48, 48, 3)) * 255).astype(np.uint8),
        "boxes": boxes,
        "labels": np.arange(len(boxes), dtype=np.int64) + 10 * i,
        "area": (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]),
        "kp": points,
        "inst": stack,
    }


SCENE = {
    "image": Image(sizes=(32,), mode="fill"),
    "boxes": Boxes("image"),
    "labels": Array("int64", (None,)),
    "area": Array("float32", (None,)),
    "kp": Keypoints("image", joints=2),
    "inst": Instances("image"),
}


@pytest.fixture(scope="module")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("crops") / "ds"
    prep.pack_samples(scene, range(8), out, SCENE, show_progress=False, jobs=1)
    return out


def unbound(x: Any) -> list[torch.Tensor]:
    return list(x.unbind()) if isinstance(x, torch.Tensor) and x.is_nested else list(x)


@pytest.mark.parametrize("policy", ["pad", "list", "jagged"])
def test_a_center_crop_keeps_the_boxes_its_transform_keeps(scenes: Path, policy: str) -> None:
    """The centred 16 px of the 32 px images: crop= reads it, T.CenterCrop(16) cuts it out of
    the whole image; the same pixels, boxes, labels, areas, keypoints and masks either way."""
    fields = (*SCENE, "index")
    idx = list(range(8))
    read = SampleDataset(scenes, fields, crop=CenterCrop(16, ratio=0.5), ragged=policy)
    aug = T.Compose([T.CenterCrop(16)], seed=0)
    moved = SampleDataset(scenes, fields, transforms=aug, ragged=policy)
    a, b = read.__getitems__(idx), moved.__getitems__(idx)
    assert torch.equal(a["image"], b["image"])
    for name in ("boxes", "labels", "area", "kp", "inst"):
        if policy == "pad":
            assert torch.equal(a[name], b[name]) and torch.equal(a[f"{name}_len"], b["boxes_len"])
        else:
            for x, y in zip(unbound(a[name]), unbound(b[name]), strict=True):
                assert x.dtype == y.dtype and torch.equal(x, y), name
    assert len(read.__getitems__([])["boxes"]) == 0  # an empty batch: nothing to drop
    stored = SampleDataset(scenes, ("boxes",), ragged="list").__getitems__(idx)["boxes"]
    left = a["boxes_len"].tolist() if policy == "pad" else [len(t) for t in unbound(a["boxes"])]
    assert 0 < sum(left) < sum(len(t) for t in stored)  # some boxes cut away, some kept


def test_a_random_resized_crop_keeps_the_boxes_its_transform_keeps(scenes: Path) -> None:
    """The same boxes drawn (crop= is the first RandomResizedCrop's generator): the same boxes,
    labels, areas and keypoints kept; the pixels are resampled apart, so they are not compared."""
    fields = (*SCENE, "index")
    idx = list(range(8))
    for epoch in range(3):
        read = SampleDataset(scenes, fields, crop=RandomResizedCrop(16, seed=4), ragged="list")
        aug = T.Compose([T.RandomResizedCrop(16)], seed=4)
        moved = SampleDataset(scenes, fields, transforms=aug, ragged="list")
        read.set_epoch(epoch)
        moved.set_epoch(epoch)
        a, b = read.__getitems__(idx), moved.__getitems__(idx)
        for name in ("boxes", "labels", "area", "kp"):
            for x, y in zip(a[name], b[name], strict=True):
                assert x.dtype == y.dtype and torch.equal(x, y), (epoch, name)
        for x, y in zip(a["inst"], b["inst"], strict=True):
            assert x.shape == y.shape
