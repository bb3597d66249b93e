"""The Boxes and Instances fields of your own samples (`pack_samples`): bound to an image field,
placed with it, checked on verify; misuse refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from manifests import edit_manifest
from typer.testing import CliRunner

import prep
from loaders import SampleDataset
from loaders.format import FormatError
from prep import UsageError
from prep.cli.main import app
from prep.fields import Array, Boxes, Image, Instances


def sample(i: int) -> dict[str, Any]:
    h, w = 40 + 10 * i, 60
    stack = np.zeros((2, h, w), np.uint8)
    stack[0, 10:20, 5:25] = 1
    stack[1, :, 30:] = 1
    boxes = np.array([[5, 10, 25, 20], [30, 0, 60, h]], np.float32)
    return {"image": np.full((h, w, 3), 90, np.uint8), "boxes": boxes, "inst": stack}


FIELDS = {
    "image": Image(sizes=(32,), mode="fit"),
    "boxes": Boxes(image="image"),
    "inst": Instances(image="image"),
}


def test_boxes_and_instances_of_your_own(tmp_path: Path) -> None:
    prep.pack_samples(sample, [0, 1], tmp_path / "ds", FIELDS, show_progress=False, jobs=1)
    ds = SampleDataset(tmp_path / "ds", ragged="list")
    b = ds.__getitems__([0, 1])
    for boxes, inst in zip(b["boxes"], b["inst"], strict=True):
        assert inst.shape == (2, 32, 32)
        for box, mask in zip(boxes.tolist(), inst.numpy(), strict=True):
            ys, xs = np.nonzero(mask)
            found = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
            np.testing.assert_allclose(found, box, atol=1.0)
    assert CliRunner().invoke(app, ["verify", str(tmp_path / "ds")]).exit_code == 0


@pytest.mark.parametrize("image", [None, "boxes"])
def test_a_manifest_that_places_boxes_on_no_image_is_refused(tmp_path: Path, image: Any) -> None:
    prep.pack_samples(sample, [0, 1], tmp_path / "ds", FIELDS, show_progress=False, jobs=1)
    edit_manifest(tmp_path / "ds", lambda d: d["fields"]["boxes"].update(image=image))
    with pytest.raises(FormatError, match=f"field boxes is placed on {image!r}"):
        SampleDataset(tmp_path / "ds")


def test_a_box_outside_or_on_another_frame_is_a_reject(tmp_path: Path) -> None:
    def make(i: int) -> dict[str, Any]:
        s = sample(0)
        s["boxes"] = [s["boxes"], s["boxes"] + 100, {"xyxy": s["boxes"], "hw": [41, 60]}][i]
        return s

    prep.pack_samples(
        make, [0, 1, 2], tmp_path / "ds", FIELDS, show_progress=False, jobs=1, max_rejects=1.0
    )
    rejects = [json.loads(line) for line in (tmp_path / "ds" / "rejects.jsonl").open()]
    assert [(r["path"], r["reason"]) for r in rejects] == [
        ("#1", "box_outside"),
        ("#2", "box_frame"),
    ]
    assert rejects[0]["message"].startswith("field boxes: box 0")


@pytest.mark.parametrize("image", ["boxes_of", "missing"])
def test_boxes_bound_to_what_is_not_an_image_exit_2(tmp_path: Path, image: str) -> None:
    fields = {"image": Image(sizes=(32,)), "boxes_of": Array("float32"), "b": Boxes(image=image)}
    with pytest.raises(UsageError, match="is not an Image field"):
        prep.pack_samples(sample, [0], tmp_path / "ds", fields, show_progress=False)
