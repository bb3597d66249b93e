"""`prep import coco` of EXIF-rotated photos: COCO's boxes, width and height are those of the
image as displayed (EXIF orientation applied), and so are prep's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from test_import_coco import CATEGORIES, _ann, expected, run_import

from loaders import SampleDataset

# EXIF orientation -> the transpose that turns the upright (displayed) image into the stored
# pixels: the inverse of what a viewer (and PIL's exif_transpose) applies.
STORED = {
    3: PILImage.Transpose.ROTATE_180,
    6: PILImage.Transpose.ROTATE_90,
    8: PILImage.Transpose.ROTATE_270,
    5: PILImage.Transpose.TRANSPOSE,
}


def test_exif_rotated_jpegs_boxes_in_the_upright_frame(tmp_path: Path) -> None:
    """COCO's boxes, width and height are those of the image as displayed (EXIF applied):
    stored rotated (a square one too), the boxes still land within 0.5 px of the README's
    rule on the upright image, and on the rectangle drawn there."""
    from PIL import ImageOps

    root = tmp_path / "coco"
    root.mkdir()
    shots = [(3, (200, 150)), (6, (200, 120)), (8, (120, 200)), (6, (160, 160)), (5, (160, 160))]
    box = [20, 30, 70, 50]
    entries, anns = [], []
    for i, (orientation, (w, h)) in enumerate(shots):
        upright = np.zeros((h, w, 3), np.uint8)
        upright[30:80, 20:90] = 255
        stored = PILImage.fromarray(upright).transpose(STORED[orientation])
        exif = PILImage.Exif()
        exif[0x0112] = orientation
        stored.save(root / f"{i}.jpg", quality=95, exif=exif)
        shown = np.asarray(ImageOps.exif_transpose(PILImage.open(root / f"{i}.jpg")))
        assert shown.shape == (h, w, 3) and shown[55, 55, 0] > 200  # as a viewer shows it
        entries.append({"id": i, "file_name": f"{i}.jpg", "width": w, "height": h})
        anns.append(_ann(i, i, 3, box, iscrowd=0, area=70 * 50))
    path = root / "instances.json"
    path.write_text(json.dumps({"images": entries, "annotations": anns, "categories": CATEGORIES}))
    result = run_import(path, tmp_path / "ds", "--sizes", "64")
    assert result.exit_code == 0, result.output
    ds = SampleDataset(tmp_path / "ds", fields=("image", "boxes"), ragged="list")
    for i, (_, (w, h)) in enumerate(shots):
        b = ds.__getitems__([i])
        got = b["boxes"][0].numpy()[0]
        np.testing.assert_allclose(got, expected(box, w, h, 64, "fill"), atol=0.5)
        ys, xs = np.nonzero(b["image"][0, 0].numpy() > 127)
        np.testing.assert_allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], got, atol=1)


def test_width_and_height_of_the_stored_pixels_are_box_frame(tmp_path: Path) -> None:
    """The JSON gives an EXIF-rotated photo its stored (sideways) size and the boxes reach past
    that frame: the mistake is the frame (`box_frame`, as the README says), not the box."""
    root = tmp_path / "coco"
    root.mkdir()
    upright = np.zeros((200, 120, 3), np.uint8)  # 120 wide, 200 tall as displayed
    exif = PILImage.Exif()
    exif[0x0112] = 6
    PILImage.fromarray(upright).transpose(STORED[6]).save(root / "0.jpg", exif=exif)
    PILImage.fromarray(upright).save(root / "1.jpg")  # no EXIF: its own size is right
    entries = [
        {"id": 0, "file_name": "0.jpg", "width": 200, "height": 120},  # the stored size
        {"id": 1, "file_name": "1.jpg", "width": 120, "height": 200},
    ]
    box = [20, 150, 50, 40]  # below y = 120 + 1: outside the frame the JSON gives 0.jpg
    anns = [_ann(i, i, 3, box, iscrowd=0, area=2000) for i in (0, 1)]
    data = {"images": entries, "annotations": anns, "categories": CATEGORIES}
    (root / "instances.json").write_text(json.dumps(data))
    result = run_import(root / "instances.json", tmp_path / "ds", "--max-rejects", "1")
    assert result.exit_code == 0, result.output
    line = json.loads((tmp_path / "ds" / "rejects.jsonl").read_text())
    assert (line["path"], line["reason"]) == ("0.jpg", "box_frame"), line
    assert "200x120 is not the image's upright size, 120x200" in line["message"]
