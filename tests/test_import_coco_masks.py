"""`prep import coco`'s optional fields: --masks (class ids) and --instances (a stack a sample)
from polygons, RLE and compressed RLE, placed like the image; --keypoints placed like the boxes,
cut ones zero (helpers and the rule: test_import_coco)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_import_coco import IMAGES, _ann, expected, run_import, write_coco
from typer.testing import CliRunner

from loaders import CenterCrop, SampleDataset
from loaders.format import read_manifest
from prep.cli.main import app
from prep.fields.rle import rle_encode


def runs(mask: np.ndarray) -> list[int]:
    """Run lengths of the column-major mask, from a run of 0s."""
    flat = mask.T.reshape(-1)
    edges = np.flatnonzero(np.diff(flat)) + 1
    counts = np.diff(np.concatenate([[0], edges, [len(flat)]])).tolist()
    return counts if flat[0] == 0 else [0, *counts]


def test_masks_from_polygons_and_rle_land_on_their_pixels(tmp_path: Path) -> None:
    src = write_coco(tmp_path / "coco")
    data = json.loads(src.read_text())
    for i, ann in enumerate(data["annotations"]):
        (w, h), (x, y, bw, bh) = IMAGES[i]
        mask = np.zeros((h, w), np.uint8)
        mask[y : y + bh, x : x + bw] = 1
        ann["segmentation"] = [
            [[x, y, x + bw, y, x + bw, y + bh, x, y + bh]],  # a polygon
            {"counts": runs(mask), "size": [h, w]},  # RLE
            rle_encode(mask),  # compressed RLE
        ][i]
    src.write_text(json.dumps(data))
    result = run_import(src, tmp_path / "ds", "--sizes", "64", "--masks")
    assert result.exit_code == 0, result.output
    ds = SampleDataset(tmp_path / "ds", fields=("image", "mask", "labels"), ragged="list")
    for i in range(len(IMAGES)):
        b = ds.__getitems__([i])
        bright, mask = b["image"][0, 0].numpy() > 127, b["mask"][0].numpy()
        assert set(np.unique(mask)) == {0, int(b["labels"][0][0]) + 1}
        iou = (bright & (mask > 0)).sum() / (bright | (mask > 0)).sum()
        assert iou > 0.9, (i, iou)


@pytest.mark.parametrize("mode", ["fill", "keep"])
def test_instance_masks_are_stacked_and_placed_like_the_image(tmp_path: Path, mode: str) -> None:
    src = write_coco(tmp_path / "coco")
    data = json.loads(src.read_text())
    for i, ann in enumerate(data["annotations"]):
        _, (x, y, bw, bh) = IMAGES[i]
        ann["segmentation"] = [[x, y, x + bw, y, x + bw, y + bh, x, y + bh]]
    second = _ann(7, 100, 3, [90, 60, 20, 20], segmentation=[[90, 60, 110, 60, 110, 80, 90, 80]])
    data["annotations"].append(second)  # image 0: two instances
    src.write_text(json.dumps(data))
    args = ["--sizes", "64", "--mode", mode, "--instances", "--masks"]
    assert run_import(src, tmp_path / "ds", *args).exit_code == 0
    fields = ("image", "instances", "mask", "boxes")
    crop = CenterCrop(64, ratio=1.0) if mode == "keep" else None
    ds = SampleDataset(tmp_path / "ds", fields=fields, crop=crop, ragged="list")
    for i in range(len(IMAGES)):
        b = ds.__getitems__([i])
        stack, mask = b["instances"][0].numpy(), b["mask"][0].numpy()
        assert stack.shape == (2 if i == 0 else 1, 64, 64) and set(np.unique(stack)) <= {0, 1}
        assert np.array_equal(stack.max(axis=0) > 0, mask > 0)  # the semantic mask's union
        ys, xs = np.nonzero(stack[0])
        found = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        np.testing.assert_allclose(found, b["boxes"][0][0], atol=1.0)


@pytest.mark.parametrize("mode", ["fill", "fit", "keep"])
def test_keypoints_land_like_boxes_and_cut_ones_are_zero(tmp_path: Path, mode: str) -> None:
    src = write_coco(tmp_path / "coco")
    data = json.loads(src.read_text())
    data["categories"][1]["keypoints"] = ["nose", "tail"]  # category 3
    data["categories"][1]["skeleton"] = [[1, 2]]
    for i, ann in enumerate(data["annotations"]):
        (w, h), (x, y, bw, bh) = IMAGES[i]
        # The box's centre and corner; image 1's corner on its bottom row, which fill crops.
        ann["keypoints"] = [x + bw / 2, y + bh / 2, 2, x + bw, h - 1 if i == 1 else y + bh, 1]
    data["annotations"][2]["keypoints"] = [1, 1, 0]  # one point, not labelled
    src.write_text(json.dumps(data))
    result = run_import(src, tmp_path / "ds", "--sizes", "64", "--mode", mode, "--keypoints")
    assert result.exit_code == 0, result.output
    cats = read_manifest(tmp_path / "ds").extra["coco"]["categories"]
    assert cats[0]["keypoints"] == ["nose", "tail"] and cats[0]["skeleton"] == [[1, 2]]
    ds = SampleDataset(tmp_path / "ds", fields=("keypoints",), ragged="list")
    for i, ((w, h), (x, y, bw, bh)) in enumerate(IMAGES):
        got = ds.__getitems__([i])["keypoints"][0].numpy()
        assert got.shape == (1, 2, 3)
        if i == 2:
            assert not got.any()  # not labelled: zeros, the missing second point too
            continue
        y1 = h - 1 if i == 1 else y + bh
        a = expected([x + bw / 2, y + bh / 2, 0, 0], w, h, 64, mode)[:2]
        b = expected([x + bw, y1, 0, 0], w, h, 64, mode)[:2]
        np.testing.assert_allclose(got[0, 0], [*a, 2], atol=0.5)
        if i == 1 and mode == "fill":
            assert not got[0, 1].any()  # cut away by the crop
        else:
            np.testing.assert_allclose(got[0, 1], [*b, 1], atol=0.5)


def test_the_demo_masks_from_rle_equal_prep_packs_masks(
    raw_demo: Path, packed: Path, tmp_path: Path
) -> None:
    """The demo's coco.json holds each shape's mask PNG as compressed RLE: imported with
    --masks, each sample's mask is exactly what `prep pack --masks` stores for that PNG."""
    from loaders import ImageShardDataset

    args = ["import", "coco", str(raw_demo / "coco.json"), str(raw_demo / "images")]
    result = CliRunner().invoke(
        app, [*args, str(tmp_path / "ds"), "-q", "--sizes", "64,96", "--masks"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (raw_demo / "detection.jsonl").open()]
    for size in (64, 96):
        ours = SampleDataset(tmp_path / "ds", fields=("mask",), size=size)
        ref = ImageShardDataset(packed, size=size, fields=("mask",))
        where = {ref.source(j): j for j in range(len(ref))}
        for i, row in enumerate(rows):
            j = where[row["path"].removeprefix("images/")]
            want = ref.__getitems__([j]).tensors[0][0]
            assert np.array_equal(ours.__getitems__([i])["mask"][0].numpy(), want.numpy())


def test_compressed_rle_against_counts_worked_by_hand() -> None:
    # counts 0, 40, 3, 100: the 4th is sent as 100 - 40 = 60, two 5-bit groups; 40 needs two too
    mask = np.ones((143, 1), np.uint8)
    mask[40:43] = 0
    assert rle_encode(mask) == {"counts": "0X13l1", "size": [143, 1]}
    assert rle_encode(np.array([[0, 1], [0, 1], [1, 0]], np.uint8))["counts"] == "231"
