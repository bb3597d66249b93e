"""`prep import coco`: boxes land where their pixels land, for fill, fit and keep (against the
README's rule written out here, and against a rectangle drawn in the image), labels and the
manifest's categories, every bad source a one-line reject, --skip-empty, dropped boxes counted,
the Boxes field moved by a load-time crop, and --resume (masks and keypoints:
test_import_coco_masks)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from loaders import CenterCrop, SampleDataset
from loaders.format import read_manifest
from prep.cli.main import app

# (w, h) of each image and its box (x, y, w, h in COCO's order): landscape, portrait (fill
# crops its top and bottom: the second box is cut), square, a thin one near an edge.
IMAGES = [
    ((200, 150), [30, 40, 90, 60]),
    ((120, 200), [10, 5, 60, 100]),
    ((160, 160), [0, 0, 160, 40]),
]
CATEGORIES = [{"id": 90, "name": "zebra"}, {"id": 3, "name": "car"}, {"id": 7, "name": "dog"}]


def write_coco(root: Path, images: list[Any] = IMAGES, extra: list[Any] = ()) -> Path:
    """Black images, each with a white rectangle where its box is; the instances JSON."""
    root.mkdir(parents=True, exist_ok=True)
    entries, anns = [], []
    for i, ((w, h), (x, y, bw, bh)) in enumerate(images):
        pixels = np.zeros((h, w, 3), np.uint8)
        pixels[y : y + bh, x : x + bw] = 255
        PILImage.fromarray(pixels).save(root / f"{i:03d}.png")
        entries.append({"id": 100 + i, "file_name": f"{i:03d}.png", "width": w, "height": h})
        cat = [3, 7, 90][i % 3]
        anns.append(_ann(i, 100 + i, cat, [x, y, bw, bh], iscrowd=i % 2, area=bw * bh - 1.5))
    anns += list(extra)
    path = root / "instances.json"
    path.write_text(json.dumps({"images": entries, "annotations": anns, "categories": CATEGORIES}))
    return path


def _ann(n: int, image: int, cat: int, bbox: list[float], **kw: Any) -> dict[str, Any]:
    return {"id": 1000 + n, "image_id": image, "category_id": cat, "bbox": bbox, **kw}


def run_import(src: Path, out: Path, *args: str) -> Any:
    base = ["import", "coco", str(src), str(src.parent), str(out), "-q", "--jobs", "1"]
    return CliRunner().invoke(app, [*base, *args])


def expected(box: list[float], w: int, h: int, size: int, mode: str) -> list[float]:
    """The README's rule, written out here: scale as the image is scaled (fill: shorter side to
    size; fit and keep: longer side to size, keep never enlarging), then centre-crop (fill) or
    centre-pad (fit) to size x size, and clip to the stored image; stretch: squash."""
    x, y, bw, bh = box
    if mode == "stretch":
        return [x * size / w, y * size / h, (x + bw) * size / w, (y + bh) * size / h]
    if mode == "fill":
        scale = size / min(w, h)
    else:
        scale = min(size / max(w, h), 1.0 if mode == "keep" else np.inf)
    cw, ch = round(w * scale), round(h * scale)
    if mode == "fill":
        cw, ch = max(cw, size), max(ch, size)
    sx, sy = cw / w, ch / h
    dx = {"fill": -((cw - size) // 2), "fit": (size - cw) // 2, "keep": 0}[mode]
    dy = {"fill": -((ch - size) // 2), "fit": (size - ch) // 2, "keep": 0}[mode]
    right, bottom = (cw, ch) if mode == "keep" else (size, size)
    out = [x * sx + dx, y * sy + dy, (x + bw) * sx + dx, (y + bh) * sy + dy]
    return [min(max(v, 0), lim) for v, lim in zip(out, [right, bottom] * 2, strict=True)]


@pytest.mark.parametrize("mode", ["fill", "fit", "keep", "stretch"])
def test_boxes_land_where_their_pixels_land(tmp_path: Path, mode: str) -> None:
    src = write_coco(tmp_path / "coco")
    result = run_import(src, tmp_path / "ds", "--sizes", "64,96", "--mode", mode)
    assert result.exit_code == 0, result.output
    for size in (64, 96):
        # Mode keep's images need a crop to make a batch: there, the boxes alone.
        fields = ("boxes",) if mode == "keep" else ("image", "boxes")
        ds = SampleDataset(tmp_path / "ds", fields=fields, size=size, ragged="list")
        for i, ((w, h), box) in enumerate(IMAGES):
            b = ds.__getitems__([i])
            got = b["boxes"][0].numpy()
            assert got.shape == (1, 4)
            np.testing.assert_allclose(got[0], expected(box, w, h, size, mode), atol=0.5)
            if mode != "keep":  # the rectangle drawn in the image, as stored: within a pixel
                ys, xs = np.nonzero(b["image"][0, 0].numpy() > 127)
                found = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
                np.testing.assert_allclose(found, got[0], atol=1.0)


def test_labels_categories_and_the_other_fields(tmp_path: Path) -> None:
    src = write_coco(tmp_path / "coco")
    assert run_import(src, tmp_path / "ds", "--sizes", "64").exit_code == 0
    manifest = read_manifest(tmp_path / "ds")
    assert manifest.classes == ["car", "dog", "zebra"]  # by category id: 3, 7, 90
    cats = manifest.extra["coco"]["categories"]
    assert [(c["id"], c["label"]) for c in cats] == [(3, 0), (7, 1), (90, 2)]
    ds = SampleDataset(tmp_path / "ds", ragged="list")
    b = ds.__getitems__([0, 1, 2])
    assert [int(t[0]) for t in b["labels"]] == [0, 1, 2]  # categories 3, 7, 90
    assert b["image_id"].tolist() == [100, 101, 102]
    assert b["source"] == ["000.png", "001.png", "002.png"]  # each image's file_name
    assert manifest.fields["labels"]["classes"] == ["car", "dog", "zebra"]
    assert [int(t[0]) for t in b["iscrowd"]] == [0, 1, 0]
    areas = [float(t[0]) for t in b["area"]]
    assert areas == [bw * bh - 1.5 for _, (_, _, bw, bh) in IMAGES]


def test_bad_sources_are_one_line_rejects(tmp_path: Path) -> None:
    more = [((50, 40), [1, 1, 10, 10])] * 5
    extra = [
        _ann(10, 104, 42, [1, 1, 5, 5]),  # image 4: an unknown category
        _ann(11, 105, 3, [30, 30, 40, 5]),  # image 5: a box beyond the 50 px edge
        {"id": 12, "image_id": 107, "category_id": 3},  # image 7: an annotation without bbox
    ]
    src = write_coco(tmp_path / "coco", IMAGES + more, extra)
    (tmp_path / "coco" / "003.png").unlink()  # image 3: missing
    data = json.loads(src.read_text())
    data["images"][6]["width"] = 40  # image 6: the file is 50 x 40, the JSON says 40 x 40
    src.write_text(json.dumps(data))
    result = run_import(src, tmp_path / "ds", "--sizes", "32", "--max-rejects", "0.7")
    assert result.exit_code == 0, result.output
    rejects = [json.loads(line) for line in (tmp_path / "ds" / "rejects.jsonl").open()]
    by_path = {r["path"]: r["reason"] for r in rejects}
    assert by_path == {
        "003.png": "missing",
        "004.png": "unknown_category",
        "005.png": "box_outside",
        "006.png": "box_frame",
        "007.png": "bad_annotation",
    }
    assert all("\n" not in r["message"] for r in rejects)
    assert "category_id 42" in next(r["message"] for r in rejects if r["path"] == "004.png")
    missing = next(r["message"] for r in rejects if r["path"] == "003.png")
    assert str(tmp_path / "coco" / "003.png") in missing and "HINT" in missing
    assert "3 boxes, 0 dropped" in result.output  # the packed images' only
    result = run_import(src, tmp_path / "ds", "--sizes", "32", "--max-rejects", "0.7", "--resume")
    assert "3 boxes, 0 dropped" in result.output  # a finished OUT: from its rejects.jsonl
    assert len(SampleDataset(tmp_path / "ds")) == 3
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": []}')
    result = run_import(bad, tmp_path / "ds2")
    assert result.exit_code == 1 and "not a COCO instances file" in result.output


def test_skip_empty_and_dropped_boxes_are_counted(tmp_path: Path) -> None:
    # Image 3 has no annotation; image 1's second box lies in the rows fill crops away.
    src = write_coco(tmp_path / "coco", [*IMAGES, ((40, 30), [0, 0, 0, 0])])
    data = json.loads(src.read_text())
    data["annotations"] = [*data["annotations"][:3], _ann(9, 101, 3, [0, 180, 120, 15])]
    src.write_text(json.dumps(data))
    result = run_import(src, tmp_path / "all", "--sizes", "64")
    assert result.exit_code == 0, result.output
    assert "4 packed" in result.output and "3 boxes, 1 dropped" in result.output
    ds = SampleDataset(tmp_path / "all", ragged="list")
    assert [len(t) for t in ds.__getitems__([0, 1, 2, 3])["boxes"]] == [1, 1, 1, 0]
    result = run_import(src, tmp_path / "some", "--sizes", "64", "--skip-empty")
    assert "3 packed" in result.output and "1 empty images skipped" in result.output


def test_same_bytes_for_any_jobs_and_boxes_follow_a_load_crop(tmp_path: Path) -> None:
    src = write_coco(tmp_path / "coco")
    args = ["--sizes", "64", "--mode", "keep", "--codec", "jpeg"]
    assert run_import(src, tmp_path / "a", *args).exit_code == 0
    assert run_import(src, tmp_path / "b", *args, "--jobs", "3").exit_code == 0

    def digest(p: Path) -> dict[str, str]:
        return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in p.glob("*.npy")}

    assert digest(tmp_path / "a") == digest(tmp_path / "b") != {}
    crop = CenterCrop(32, ratio=1.0)
    cropped = SampleDataset(tmp_path / "a", fields=("image", "boxes"), crop=crop, ragged="list")
    stored = SampleDataset(tmp_path / "a", fields=("boxes",), ragged="list")
    for i, ((w, h), _) in enumerate(IMAGES):
        x0, y0, x1, y1 = stored.__getitems__([i])["boxes"][0][0].tolist()
        scale = min(64 / max(w, h), 1.0)
        h, w = round(h * scale), round(w * scale)  # the stored image
        side = min(h, w)
        top, left = (h - side) // 2, (w - side) // 2
        want = [(x0 - left) * 32 / side, (y0 - top) * 32 / side]
        want += [(x1 - left) * 32 / side, (y1 - top) * 32 / side]
        want = [min(max(v, 0), 32) for v in want]
        np.testing.assert_allclose(cropped.__getitems__([i])["boxes"][0][0], want, atol=1e-4)


def test_the_demo_coco_file_matches_its_detection_rows(raw_demo: Path, tmp_path: Path) -> None:
    """`prep demo`'s coco.json (EXIF-rotated photos among them) against its detection.jsonl,
    read independently: the same boxes, in the stored pixels."""
    args = ["import", "coco", str(raw_demo / "coco.json"), str(raw_demo / "images")]
    result = CliRunner().invoke(app, [*args, str(tmp_path / "ds"), "-q", "--sizes", "64"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (raw_demo / "detection.jsonl").open()]
    ds = SampleDataset(tmp_path / "ds", fields=("boxes", "labels"), ragged="list")
    assert len(ds) == len(rows)
    for i, row in enumerate(rows):
        w, h = row["width"], row["height"]
        b = ds.__getitems__([i])
        for got, (x0, y0, x1, y1) in zip(b["boxes"][0], row["boxes"], strict=True):
            box = [x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h]
            np.testing.assert_allclose(got, expected(box, w, h, 64, "fill"), atol=0.5)
        assert b["labels"][0].tolist() == [
            ("circle", "square", "triangle", "cross").index(c) for c in row["labels"]
        ]


def test_resume_reuses_and_a_changed_image_is_not_resumed(tmp_path: Path) -> None:
    src = write_coco(tmp_path / "coco")
    args = ["--sizes", "32", "--shard-size", "1"]
    assert run_import(src, tmp_path / "ds", *args).exit_code == 0
    result = run_import(src, tmp_path / "ds", *args, "--resume")
    assert result.exit_code == 0 and "(3 reused)" in result.output
    image = tmp_path / "coco" / "001.png"
    os.utime(image, ns=(image.stat().st_atime_ns, image.stat().st_mtime_ns + 10**9))
    result = run_import(src, tmp_path / "ds", *args, "--resume")
    assert result.exit_code == 1 and "changed" in result.output
