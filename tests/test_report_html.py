"""prep report: one self-contained HTML page per data kind (images with masks, samples with
boxes, tokens, volumes, a table, audio), its sections present, its images embedded, its size
bounded for a million samples (tests/test_report_browser.py opens it in Chromium)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner
from untrusted import packed_table, volumes

import prep
from prep.cli.main import app
from prep.fields import Array, Boxes, Image, Label, Mask
from prep.inspect import pages
from prep.inspect.html import jpeg_uri
from prep.inspect.htmlreport import write_report
from prep.kinds.text.config import TokenizeConfig
from prep.kinds.text.tokenize import tokenize

LIMIT_BYTES = 20_000_000  # the bound on a report of a 1,000,000-sample dataset


def ids(text: str) -> list[str]:
    return re.findall(r'<section id="([\w-]+)"', text)


def images_in(text: str) -> list[str]:
    return re.findall(r'<img src="(data:image/jpeg;base64,[^"]+)"', text)


def test_images_with_masks_report(packed: Path, copy_dataset: Any) -> None:
    root = copy_dataset(packed)
    out = root / "report.html"  # the default
    result = CliRunner().invoke(app, ["report", str(root), "-n", "2", "-q"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out)
    text = out.read_text()
    assert {"counts", "sizes", "samples", "stats", "rejects", "fields"} <= set(ids(text))
    assert "drawn on them: mask" in text
    samples = text.split('<section id="samples"')[1].split("</section>")[0]
    assert len(images_in(samples)) == 4 * 2  # 4 classes, 2 a class (the quality page has more)
    assert text.count("<svg") >= 3  # counts, sizes, channels
    assert re.search(r'(src|href)="(?!data:|#)', text) is None  # nothing to fetch
    stats = prep_stats(packed)
    assert f"{stats[0]:.2f}" in text  # the stored mean of the red channel, as Normalize reads it


def prep_stats(root: Path) -> list[float]:
    from loaders.format import read_manifest

    sizes = read_manifest(root).extra["stats"]["image"]["sizes"]
    return list(sizes[min(sizes, key=int)]["mean"])


def sample(i: int) -> dict[str, Any]:
    """A 40x60 grey image with a white rectangle, its box and mask; input 4's box lies outside
    the image (a box_outside reject)."""
    img = np.full((40, 60, 3), 30 * i, np.uint8)
    img[10:20, 5:25] = 255
    mask = np.zeros((40, 60), np.uint8)
    mask[10:20, 5:25] = 1
    boxes = np.array([[5, 10, 25, 20]], np.float32) + (100 if i == 4 else 0)
    return {"image": img, "boxes": boxes, "mask": mask, "labels": np.array([i % 2]), "label": i % 2}


def test_samples_with_boxes_and_masks_report(tmp_path: Path) -> None:
    fields = {
        "image": Image(sizes=(32,), mode="keep"),
        "boxes": Boxes(image="image"),
        "mask": Mask(image="image"),
        "labels": Array("int64", shape=(None,)),
        "label": Label(classes=("cat", "dog")),
    }
    root = tmp_path / "ds"
    prep.pack_samples(sample, range(5), root, fields, show_progress=False, jobs=1, max_rejects=1)
    text = write_report(root, tmp_path / "r.html").read_text()
    assert {"counts", "sizes", "samples", "fields", "rejects"} <= set(ids(text))
    assert "drawn on them: boxes, mask" in text and "(1 boxes)" in text
    assert len(images_in(text)) == 4
    assert "cat" in text and "dog" in text
    assert "1 rejected inputs, 1 reasons" in text and "<td>box_outside</td><td>#4</td>" in text


def test_tokens_report(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(6):
        (src / f"{i}.txt").write_text("packed shards load fast " * (i + 2))
    out = tmp_path / "tok"
    tokenize(
        TokenizeConfig(src=str(src), out=str(out), jobs=1, val_fraction=0), show_progress=False
    )
    text = write_report(out).read_text()
    assert {"counts", "tokens", "rejects", "fields"} <= set(ids(text))
    assert "most common tokens" in text and "<td>97</td><td>&#x27;a&#x27;</td>" in text  # bytes


def test_volumes_report(tmp_path: Path) -> None:
    root = volumes(tmp_path / "v", [(4, 5, 6), (3, 4, 5)], [0, 120, 180], 180)
    text = write_report(root).read_text()
    assert {"counts", "sizes", "samples"} <= set(ids(text))
    assert len(images_in(text)) == 2 * 3  # three middle slices a volume


def test_table_report(tmp_path: Path) -> None:
    text = write_report(packed_table(tmp_path)).read_text()
    assert {"counts", "table", "rejects"} <= set(ids(text))
    assert ">city<" in text and ">x<" in text and "oslo" in text


def test_audio_report(tmp_path: Path) -> None:
    sf = pytest.importorskip("soundfile", reason="prep audio (the media extra)")
    from prep.kinds.audio.config import AudioConfig
    from prep.kinds.audio.pack import audio

    for name, rate, seconds in (("a/x.wav", 8000, 0.5), ("b/y.flac", 16000, 0.25)):
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        sf.write(tmp_path / "src" / name, np.zeros(int(rate * seconds), np.float32), rate)
    cfg = AudioConfig(src=str(tmp_path / "src"), out=str(tmp_path / "au"), mono=True, jobs=1)
    audio(cfg, show_progress=False)
    text = write_report(tmp_path / "au").read_text()
    assert {"counts", "audio", "fields", "rejects"} <= set(ids(text))
    assert "2 clips, 0.8 s at 16000 Hz" in text and "0.25-0.50 s a clip" in text
    got = CliRunner().invoke(app, ["report", str(tmp_path / "au"), "--against", cfg.out])
    assert got.exit_code == 1 and "have no image field" in got.output


def test_near_duplicates_and_leakage(
    packed: Path, raw_demo: Path, tmp_path: Path, pack_to: Any
) -> None:
    """val: one train photo twice (under two names) and another: a group of two in val, and
    all three of val leaked from train."""
    first, second = sorted((raw_demo / "images" / "circle").glob("*.jpg"))[:2]
    (tmp_path / "val" / "circle").mkdir(parents=True)
    for name, src in (("a.jpg", first), ("b.jpg", first), ("c.jpg", second)):
        shutil.copy(src, tmp_path / "val" / "circle" / name)
    val = tmp_path / "v"
    pack_to(tmp_path / "val", val, sizes=[64])
    text = write_report(val, tmp_path / "val.html", compute_hashes=True).read_text()
    assert "1 groups of near-duplicates" in text and "group of 2" in text
    page = write_report(packed, tmp_path / "r.html", against=val, compute_hashes=True)
    text = page.read_text()
    assert {"dupes", "leakage"} <= set(ids(text))
    assert re.search(r"FAIL: 3 of 3 samples of \S+ \(100.00%\) have a near twin", text)
    assert "val 0 d=0" in text and "val 1 d=0" in text


def test_bad_input_is_one_line(tmp_path: Path, packed: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert missing.exit_code != 0 and missing.output.startswith("error:")
    table = packed_table(tmp_path)
    mixed = runner.invoke(app, ["report", str(packed), "--against", str(table)])
    assert mixed.exit_code == 1 and "--against compares" in mixed.output
    zero = runner.invoke(app, ["report", str(packed), "--max-samples", "0"])
    assert zero.exit_code == 2 and "--max-samples" in zero.output


def million(root: Path, n: int = 1_000_000, classes: int = 1000) -> Path:
    """An image dataset of n 8 px samples: its labels real, its pixels a sparse file of zeros
    (nothing but the header is written), so that a million samples cost a few MB of disk."""
    from loaders.format import MANIFEST, ArrayRef, FileInfo, Manifest, Shard

    root.mkdir(parents=True)
    fields = {
        "image": Image(sizes=(8,)),
        "label": Label(tuple(f"class {c}" for c in range(classes))),
    }
    arrays = {
        f"{s.field}_{s.size}" if s.size else s.field: s
        for n_, f in fields.items()
        for s in f.arrays(n_)
    }
    labels = np.random.default_rng(0).integers(0, classes, n).astype(arrays["label"].dtype)
    np.save(root / "label-00000.npy", labels)
    pixels = np.lib.format.open_memmap(root / "image_8-00000.npy", "w+", np.uint8, (n, 8, 8, 3))
    del pixels  # a sparse file: the header and one byte written
    refs = {a: ArrayRef(f"{a}-00000.npy", n) for a in arrays}
    # the checksums are not the files': verify would say so; report reads none
    files = {r.file: FileInfo((root / r.file).stat().st_size, "0" * 64) for r in refs.values()}
    described = {k: f.describe() for k, f in fields.items()}
    m = Manifest("npy", arrays, [Shard(n, refs, files)], fields=described, command="pack")
    (root / MANIFEST).write_text(m.to_json())
    return root


def test_a_million_samples_report_is_sampled_and_bounded(tmp_path: Path) -> None:
    out = write_report(million(tmp_path / "m"), tmp_path / "r.html")
    text = out.read_text()
    shown = images_in(text)
    assert len(shown) == pages.GRID_BUDGET  # 1000 classes: one each for the first 256
    assert out.stat().st_size < LIMIT_BYTES
    # The worst case, whatever the pixels: every tile a TILE_MAX square of noise (JPEG's
    # largest), plus the page without its tiles.
    noise = np.random.default_rng(0).integers(0, 256, (pages.TILE_MAX,) * 2 + (3,), np.uint8)
    rest = len(text) - sum(len(s) for s in shown)
    tiles = pages.GRID_BUDGET + 16 * 8 + 32 * 2  # grid, near-duplicate rows, leakage pairs
    assert rest + tiles * len(jpeg_uri(noise)) < LIMIT_BYTES


@pytest.mark.parametrize("labels", [None, np.array([3, 1, 3, 3, 1, 0])])
def test_pick_is_seeded_and_per_class(labels: np.ndarray | None) -> None:
    a, b = pages.pick(labels, 6, 2), pages.pick(labels, 6, 2)
    assert {k: v.tolist() for k, v in a.items()} == {k: v.tolist() for k, v in b.items()}
    if labels is None:
        assert list(a) == [-1] and len(a[-1]) == 2
    else:
        assert sorted(a) == [0, 1, 3]
        assert all((labels[v] == k).all() and len(v) <= 2 for k, v in a.items())


def test_tiles_draw_boxes_and_masks() -> None:
    """A box's outline in its colour at the tile's scale, its inside left as it was; a mask's
    pixels tinted, the rest not (each field draws itself: Field.draw)."""
    from loaders.fields.drawing import PALETTE

    img = np.zeros((256, 256, 3), np.uint8)
    rgb, scale = pages.shrink(img)
    assert rgb.shape == (128, 128, 3) and scale == 0.5
    box = np.array([[40, 40, 200, 200]], np.float32)
    drawn = Boxes().draw([rgb], box, scale)[0]
    assert (drawn[20, 30:100] == PALETTE[0]).all() and not drawn[30:90, 30:90].any()
    mask = np.zeros((256, 256), np.uint8)
    mask[:64] = 2
    tinted = Mask().draw([rgb], mask, scale)[0]
    assert tinted[:32].any(axis=2).all() and not tinted[32:].any()


def test_counts_per_split_and_class(packed: Path) -> None:
    """One bar a split in each class's group, a class no sample has named in red."""
    import dataclasses

    from loaders.fields.checks import load_manifest
    from prep.inspect import htmlreport

    m = load_manifest(packed)
    m = dataclasses.replace(m, shards=list(m.shards), index=None)  # records to edit
    m.shards[-1].split = "val"
    labels = np.arange(m.num_samples) % 4
    body = htmlreport.counts(m, labels, names=[*(m.classes or []), "empty"]).body
    assert "samples per class and split" in body and ">val<" in body and ">all<" in body
    assert "1 classes with no samples: empty" in body
