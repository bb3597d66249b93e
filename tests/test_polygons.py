"""The polygons field (a field kind added on the registry alone): `prep import coco --polygons`
stores each instance's outlines placed like the image, cut to what it shows; a load-time crop=
moves and clips them; the report draws them; transforms= refuses them with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_import_coco import IMAGES, expected, run_import, write_coco
from typer.testing import CliRunner

from loaders import CenterCrop, SampleDataset
from loaders.fields.polygons import area, clip
from prep.cli.main import app


def rect(x: float, y: float, w: float, h: float) -> list[float]:
    return [x, y, x + w, y, x + w, y + h, x, y + h]


def packed(tmp_path: Path, mode: str) -> Path:
    """The test COCO file, each instance one rectangle polygon over its box, image 0 with a
    second (a triangle), imported at 64 px with --polygons."""
    src = write_coco(tmp_path / "coco")
    data = json.loads(src.read_text())
    for i, ann in enumerate(data["annotations"]):
        ann["segmentation"] = [rect(*IMAGES[i][1])]
    data["annotations"][0]["segmentation"].append([100, 80, 140, 80, 120, 110])
    src.write_text(json.dumps(data))
    result = run_import(src, tmp_path / "ds", "--sizes", "64", "--mode", mode, "--polygons")
    assert result.exit_code == 0, result.output
    return tmp_path / "ds"


@pytest.mark.parametrize("mode", ["fill", "fit", "keep", "stretch"])
def test_polygons_land_where_their_pixels_land(tmp_path: Path, mode: str) -> None:
    root = packed(tmp_path, mode)
    assert (
        json.loads((root / "manifest.json").read_text())["fields"]["polygons"]["kind"] == "polygons"
    )
    ds = SampleDataset(root, fields=("polygons", "boxes"), ragged="list")
    for i, ((w, h), box) in enumerate(IMAGES):
        b = ds.__getitems__([i])
        polys = [p.numpy() for p in b["polygons"][0]]
        assert len(polys) == (2 if i == 0 else 1) and all(p.dtype == np.float32 for p in polys)
        outline = [*polys[0].min(axis=0), *polys[0].max(axis=0)]
        np.testing.assert_allclose(outline, expected(box, w, h, 64, mode), atol=1e-3)
        np.testing.assert_allclose(outline, b["boxes"][0][0], atol=1e-3)
    tri = expected([100, 80, 40, 30], *IMAGES[0][0], 64, mode)
    got = ds.__getitems__([0])["polygons"][0][1].numpy()
    np.testing.assert_allclose([*got.min(axis=0), *got.max(axis=0)], tri, atol=1e-3)


def test_a_load_crop_moves_clips_and_drops_polygons(tmp_path: Path) -> None:
    root = packed(tmp_path, "keep")
    stored = SampleDataset(root, fields=("polygons",), ragged="list")
    crop = CenterCrop(32, ratio=1.0)
    ds = SampleDataset(root, fields=("image", "polygons"), crop=crop, ragged="list")
    for i, ((w, h), _) in enumerate(IMAGES):
        scale = min(64 / max(w, h), 1.0)
        sh, sw = round(h * scale), round(w * scale)  # the stored image
        side = min(sh, sw)
        top, left = (sh - side) // 2, (sw - side) // 2
        want = []
        for p in stored.__getitems__([i])["polygons"][0]:
            moved = clip((p.numpy() - [left, top]) * 32 / side, 32, 32)
            if len(moved) >= 3 and area(moved) > 0:
                want.append(moved)
        got = ds.__getitems__([i])["polygons"][0]
        assert len(got) == len(want) and len(want) >= 1
        for g, e in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), e, atol=1e-4)
            assert g.min() >= 0 and g.max() <= 32


def test_clip_keeps_the_inside_and_drops_what_is_outside() -> None:
    square = np.array([[2, 2], [6, 2], [6, 6], [2, 6]], np.float64)
    np.testing.assert_allclose(clip(square, 10, 10), square)
    assert area(clip(square, 4, 4)) == pytest.approx(4.0)  # the 2 x 2 corner inside
    assert len(clip(square + 20, 10, 10)) == 0


def test_transforms_refuse_polygons_and_the_report_draws_them(tmp_path: Path) -> None:
    from loaders.transforms import Compose, RandomHorizontalFlip

    root = packed(tmp_path, "fill")
    with pytest.raises(ValueError, match=r"does not move field polygons.*HINT"):
        SampleDataset(
            root, fields=("image", "polygons"), transforms=Compose([RandomHorizontalFlip()])
        )
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", str(root), "-n", "2", "-q", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "polygons" in out.read_text()
