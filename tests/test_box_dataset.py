"""SampleDataset(transforms=): a COCO import's image, boxes, instance masks and per-box fields
(labels, area) come out of the dataset as the same Compose makes them of the plain batch, the
dropped boxes' rows gone from every field; what it cannot move is refused with the fix; split=
reads one split."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image as PILImage

from loaders import SampleDataset
from loaders import transforms as T
from prep.kinds.importers.coco import import_coco
from prep.kinds.importers.config import CocoConfig


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six 64 x 48 black images, each with white rectangles where its two boxes are."""
    root = tmp_path_factory.mktemp("boxcoco")
    images, anns = [], []
    for i in range(6):
        pixels = np.zeros((48, 64, 3), np.uint8)
        for k, (x, y, w, h) in enumerate([(4 + i, 6, 20, 14), (40, 30 - i, 3, 12)]):
            pixels[y : y + h, x : x + w] = 255
            ann = {"id": 10 * i + k, "image_id": i, "category_id": 1 + k, "bbox": [x, y, w, h]}
            ann["segmentation"] = [[x, y, x + w, y, x + w, y + h, x, y + h]]
            anns.append(ann | {"area": w * h, "iscrowd": 0})
        PILImage.fromarray(pixels).save(root / f"{i}.png")
        images.append({"id": i, "file_name": f"{i}.png", "width": 64, "height": 48})
    cats = [{"id": 1, "name": "big"}, {"id": 2, "name": "thin"}]
    src = root / "coco.json"
    src.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    out = root / "packed"
    cfg = CocoConfig(
        src=str(src), images=str(root), out=str(out), sizes=[64], mode="fit", instances=True, jobs=1
    )
    import_coco(cfg, show_progress=False)
    return out


@pytest.mark.parametrize("ragged", ["pad", "list"])
def test_sample_dataset_moves_boxes_and_drops_their_fields(coco: Path, ragged: str) -> None:
    fields = ("image", "boxes", "labels", "area", "instances", "index")
    aug = T.Compose([T.RandomCrop(32), T.RandomHorizontalFlip()], seed=2)
    ds = SampleDataset(coco, fields=fields, size=64, transforms=aug, ragged=ragged)
    plain = SampleDataset(coco, fields=fields, size=64, ragged=ragged)
    ds.set_epoch(1)
    batch, raw = ds.__getitems__(range(6)), plain.__getitems__(range(6))
    aug.set_epoch(1)
    lists = {f: rows(raw, f, ragged) for f in ("boxes", "labels", "area", "instances")}
    x, boxes, inst, pb = aug(
        raw["image"],
        index=raw["index"],
        boxes=lists.pop("boxes"),
        instances=lists.pop("instances"),
        per_box=lists,
    )
    assert torch.equal(batch["image"], x) and batch["image"].shape[-2:] == (32, 32)
    got = {f: rows(batch, f, ragged) for f in ("boxes", "labels", "area", "instances")}
    for b in range(6):
        assert torch.equal(got["boxes"][b], boxes[b]) and torch.equal(got["instances"][b], inst[b])
        assert inst[b].shape[1:] == (32, 32) and inst[b].flatten(1).any(1).all()
        for f in ("labels", "area"):
            assert torch.equal(got[f][b], pb[f][b])
    kept = sum(map(len, boxes))
    assert 0 < kept < 12  # the thin box is often cut away
    assert sorted(set(torch.cat(got["labels"]).tolist())) == [0, 1]


def rows(batch: Any, field: str, ragged: str) -> list[torch.Tensor]:
    """A ragged field's batch as a tensor a sample, whatever the policy."""
    if ragged == "list":
        return list(batch[field])
    return [v[:n] for v, n in zip(batch[field], batch[f"{field}_len"], strict=True)]


def test_sample_dataset_refuses_what_it_cannot_move(coco: Path) -> None:
    with pytest.raises(TypeError, match="Compose"):
        SampleDataset(coco, size=64, transforms=T.RandomHorizontalFlip())
    with pytest.raises(ValueError, match="image field"):
        SampleDataset(coco, fields=("labels",), size=64, transforms=T.Compose([]))
    with pytest.raises(ValueError, match="read 'boxes' too"):
        SampleDataset(coco, fields=("image", "instances"), size=64, transforms=T.Compose([]))


def test_split_reads_one_splits_shards(tmp_path: Path) -> None:
    """A samples dataset with splits (prep import hf of Parquet files split by name)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from prep.kinds.importers.config import HFConfig
    from prep.kinds.importers.hf import import_hf

    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.table({"x": [1, 2, 3]}), src / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"x": [7, 8]}), src / "validation-00000-of-00001.parquet")
    import_hf(HFConfig(src=str(src), out=str(tmp_path / "out"), jobs=1), show_progress=False)
    for split, want in ((None, [1, 2, 3, 7, 8]), ("train", [1, 2, 3]), ("validation", [7, 8])):
        ds = SampleDataset(tmp_path / "out", fields=("x", "index"), split=split)
        batch = ds.__getitems__(range(len(ds)))
        assert batch["x"].tolist() == want
        assert batch["index"].tolist() == list(range(len(want)))  # positions within the split


def test_mode_keep_reads_the_leading_random_resized_crop(coco: Path) -> None:
    """Mode keep's samples have their own shapes: the pipeline's leading RandomResizedCrop is
    read as the dataset's crop, its boxes those the op draws (torchvision's box math: shift,
    scale, clip, drop what is under 1 px), as the issue's example writes it."""
    out = coco.parent / "keep"
    src, images = str(coco.parent / "coco.json"), str(coco.parent)
    cfg = CocoConfig(src=src, images=images, out=str(out), sizes=[64], mode="keep", jobs=1)
    import_coco(cfg, show_progress=False)
    aug = T.Compose([T.RandomResizedCrop(32, scale=(0.2, 1.0))], seed=2)
    ds = SampleDataset(out, fields=("image", "boxes", "labels"), transforms=aug, ragged="list")
    ds.set_epoch(1)
    batch = ds.__getitems__(range(6))
    stored = SampleDataset(out, fields=("boxes", "labels"), ragged="list").__getitems__(range(6))
    assert batch["image"].shape == (6, 3, 32, 32)
    op = T.RandomResizedCrop(32, scale=(0.2, 1.0))
    drawn = op.boxes(torch.arange(6), 48, 64, seed=2, epoch=1)  # (top, left, h, w)
    for b, (top, left, h, w) in enumerate(drawn.tolist()):
        box = stored["boxes"][b].double() - torch.tensor([left, top, left, top])
        box = (box * torch.tensor([32 / w, 32 / h] * 2)).clamp(0, 32)
        keep = (box[:, 2] - box[:, 0] >= 1) & (box[:, 3] - box[:, 1] >= 1)
        assert torch.allclose(batch["boxes"][b].double(), box[keep], atol=1e-4)
        assert torch.equal(batch["labels"][b], stored["labels"][b][keep])
