"""Inspection through the fields (issue 35): info, verify, preview, report and dupes ask each
field of a dataset, whatever command wrote it: an import's image field is previewed and checked
for leakage, a label is drawn as its class name, a video as its frames, a duplicate group that
crosses splits is marked, and the files a field keeps beside the shards are verified."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from manifests import edit_manifest
from PIL import Image, ImageOps
from typer.testing import CliRunner

from loaders import SampleDataset
from loaders.fields.drawing import PALETTE
from prep.cli.main import app
from prep.inspect.htmlreport import write_report
from prep.inspect.preview import preview

LEGACY = Path(__file__).parent / "legacy" / "packed"  # every kind, as v4 fields once read


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def section(text: str, name: str) -> str:
    return text.split(f'<section id="{name}"', 1)[1].split("</section>", 1)[0]


def test_dupes_finds_leakage_between_the_splits_of_an_import(tmp_path: Path) -> None:
    """An HF import (no stored hashes): sample 1 of its validation split made a copy of train
    sample 6; --hash computes the hashes from the image field's pixels."""
    root = shutil.copytree(LEGACY / "import-hf", tmp_path / "hf")
    train = np.load(root / "image_16-00001.npy")  # train samples 4-7
    val = np.load(root / "image_16-00003.npy", mmap_mode="r+")  # the validation shard
    val[1] = train[2]
    val.flush()
    del val
    a = SampleDataset(root, fields=["image"], split="train")[6]["image"]
    b = SampleDataset(root, fields=["image"], split="validation")[1]["image"]
    assert (a == b).all()  # the planted copy, as the loader reads it
    args = ["dupes", root, "--hash", "--split", "train", "--against-split", "validation"]
    res = invoke(*args, "--json")
    assert res.exit_code == 0, res.output
    pairs = [
        (p["index"], p["against_index"], p["distance"]) for p in json.loads(res.output)["pairs"]
    ]
    assert pairs == [(6, 1, 0)]
    res = invoke(*args)
    assert "1 of 3 samples (33.3%) have a near-duplicate" in res.output


def test_preview_of_a_coco_import_draws_its_masks_and_boxes(tmp_path: Path) -> None:
    root = LEGACY / "import-coco"
    res = preview(root, count=2, output=tmp_path / "s.png")
    assert (res.tiles, res.size) == (2, 16)
    sheet = np.asarray(Image.open(tmp_path / "s.png").convert("RGB")).astype(int)
    ds = SampleDataset(root, ["image", "boxes", "mask", "instances"], size=16, ragged="list")
    got = ds.__getitems__([0])
    image = got["image"][0].permute(1, 2, 0).numpy().astype(int)
    x, y = res.layout.origin(0)
    tile = sheet[y : y + 16, x : x + 16]
    x0, y0, x1, _ = (round(float(v)) for v in got["boxes"][0][0])
    assert (tile[y0, x0 : x1 + 1] == PALETTE[0]).all()  # box 0's top edge, over the masks
    plain = (got["mask"][0].numpy() == 0) & (got["instances"][0].numpy().sum(0) == 0)
    plain[y0 - 1 : y0 + 2] = False  # off the outline
    plain[:, x0 - 1 : x1 + 2] = False
    assert plain.any() and (tile[plain] == image[plain]).all()  # the stored pixels, untouched
    assert not (tile[got["mask"][0].numpy() > 0] == image[got["mask"][0].numpy() > 0]).all()
    assert invoke("preview", root, "-n", "3", "-o", tmp_path / "c.png").exit_code == 0


def _captions(text: str) -> list[str]:
    return re.findall(r"<figcaption>([^<]*)</figcaption>", section(text, "samples"))


def test_report_captions_each_tile_with_its_class_name(tmp_path: Path) -> None:
    root = LEGACY / "import-hf"
    text = write_report(root, tmp_path / "r.html", per_class=2).read_text()
    ds = SampleDataset(root, fields=["label"])
    classes = ["circle", "square", "triangle", "cross"]  # the import's ClassLabel names
    shown = _captions(text)
    assert len(shown) == 2 * 4
    for caption in shown:
        i = int(caption.split()[0])
        assert caption.split()[1] == classes[int(ds[i]["label"])], caption


def test_object_labels_are_named_on_tiles_and_counted_by_class(tmp_path: Path) -> None:
    """A COCO import whose per-box labels declare their classes (a Labels field)."""
    root = shutil.copytree(LEGACY / "import-coco", tmp_path / "coco")
    names = ["circle", "square", "triangle", "cross"]

    def declare(d: dict[str, Any]) -> None:  # version 3: the fields are extra.fields
        d["extra"]["fields"]["labels"] = {"kind": "labels", "classes": names}

    edit_manifest(root, declare)
    text = write_report(root, tmp_path / "r.html", per_class=12).read_text()
    ds = SampleDataset(root, fields=["labels"], ragged="list")
    for caption in _captions(text):
        i = int(caption.split()[0])
        want = ", ".join(names[k] for k in ds[i]["labels"].tolist())
        assert f"{i} {want} (" in caption, caption
    objects = np.concatenate([ds[i]["labels"].numpy() for i in range(len(ds))])
    counts = section(text, "counts")
    for k, n in zip(*np.unique(objects, return_counts=True), strict=True):
        assert f"<tr><td>{names[k]}</td><td>{n}</td></tr>" in counts
    res = invoke("preview", root, "-n", "2", "-o", tmp_path / "s.png")
    assert res.exit_code == 0, res.output


def test_report_draws_a_video_as_its_frames(tmp_path: Path) -> None:
    root = LEGACY / "video-jpeg"
    text = write_report(root, tmp_path / "r.html").read_text()
    ds = SampleDataset(root, fields=["frames", "label"])
    frames = [len(ds[i]["frames"]) for i in range(len(ds))]
    shown = _captions(text)
    assert len(shown) == sum(min(4, n) for n in frames)  # up to 4 frames a video
    for i, n in enumerate(frames):
        mine = [c for c in shown if c.split()[0] == str(i)]
        fps = 6.0
        times = [f"{t / fps:.1f} s" for t in np.unique(np.linspace(0, n - 1, min(4, n)).round())]
        assert [re.search(r"\d+\.\d s", c)[0] for c in mine] == times  # type: ignore[index]
        assert all(f"({n} frames)" in c for c in mine)


def test_duplicate_groups_across_splits_are_marked(
    raw_demo: Path, tmp_path: Path, pack_to: Any
) -> None:
    """Photos and their q90 copies, split by the hash of the path: a pair whose two files fell
    into two splits is a group across them, in `prep dupes` and in the report."""
    import io

    src = tmp_path / "src" / "x"
    src.mkdir(parents=True)
    for k, p in enumerate(sorted((raw_demo / "images").rglob("*.jpg"))[:6]):
        shutil.copy(p, src / f"{k}.jpg")
        with Image.open(p) as im:  # upright, re-encoded
            buf = io.BytesIO()
            ImageOps.exif_transpose(im).convert("RGB").save(buf, "JPEG", quality=90)
        (src / f"{k}-q90.jpg").write_bytes(buf.getvalue())
    out = tmp_path / "ds"
    pack_to(tmp_path / "src", out, sizes=[32], val_fraction=0.5)
    split_of = {}
    for split in ("train", "val"):
        ds = SampleDataset(out, fields=["label"], split=split)
        split_of |= {ds.source(i): split for i in range(len(ds))}
    across = {k for k in range(6) if split_of[f"x/{k}.jpg"] != split_of[f"x/{k}-q90.jpg"]}
    assert across and len(across) < 6  # the fixture holds both cases
    res = invoke("dupes", out, "--json")
    groups = json.loads(res.output)["groups"]
    marked = {g["paths"][0][2] for g in groups if len(g["splits"]) > 1}
    assert marked == {str(k) for k in across}
    assert invoke("dupes", out).output.count("(across splits") == len(across)
    text = write_report(out, tmp_path / "r.html").read_text()
    assert f"; {len(across)} cross splits" in text
    assert section(text, "dupes").count("across splits") == len(across)


def test_verify_checks_the_files_a_field_keeps(tmp_path: Path) -> None:
    """A samples dataset's Tokens field keeps its tokenizer beside the shards."""
    root = shutil.copytree(LEGACY / "samples", tmp_path / "s")
    assert invoke("verify", root).exit_code == 0
    (root / "tokens.tokenizer.json").unlink()
    res = invoke("verify", root)
    assert res.exit_code == 1 and "tokens.tokenizer.json is missing" in res.output


@pytest.mark.parametrize("fixture", sorted(p.name for p in LEGACY.iterdir()))
def test_info_and_preview_of_every_kind(fixture: str, tmp_path: Path) -> None:
    """Each field's lines in `prep info`; a contact sheet of what has pictures, rows else."""
    root = LEGACY / fixture
    res = invoke("info", root)
    assert res.exit_code == 0, res.output
    fields = json.loads((root / "manifest.json").read_text())
    named = fields.get("fields") or fields["extra"].get("fields") or {}
    assert all(name in res.output.splitlines()[0] for name in named)
    res = invoke("preview", root, "-n", "4", "-o", tmp_path / "s.png")
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    if (tmp_path / "s.png").exists():
        assert "4 samples at" in res.output or "2 samples at" in res.output
    else:  # a table, tokens: the first rows, a line each after the header
        assert len(res.output.strip().splitlines()) == 5


@pytest.mark.parametrize(
    ("fixture", "parts", "said"),
    [
        ("volumes", {"counts", "sizes", "samples", "table"}, "<td>dose</td>"),  # its targets
        ("table", {"counts", "table", "rejects"}, "<td>city</td>"),
        ("tokens-bytes", {"counts", "tokens", "values"}, "<td>97</td><td>&#x27;a&#x27;</td>"),
        ("audio", {"counts", "audio", "values"}, "9 clips, 1.1 s at 8000 Hz"),
        ("samples", {"samples", "tokens", "values", "stats", "sizes", "dupes"}, "(2 instances)"),
    ],
)
def test_report_has_a_section_for_each_field_kind(
    fixture: str, parts: set[str], said: str, tmp_path: Path
) -> None:
    text = write_report(LEGACY / fixture, tmp_path / "r.html", per_class=2).read_text()
    assert parts <= set(re.findall(r'<section id="([\w-]+)"', text)) and said in text
