"""What a newcomer met packing third-party images (issues 23 and 24): mode keep previews as
stored, source paths per sample, transparent PNGs, and preview on damaged folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import one_colour_share, run_pack
from manifests import edit_manifest
from PIL import Image
from typer.testing import CliRunner

from loaders import DocumentDataset, ImageShardDataset
from loaders.format import FormatError, read_manifest
from prep.cli.main import app
from prep.inspect.preview import SHEET_BG, preview


def _gradient(h: int, w: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 255 // w, y * 255 // h, (x + y) % 256], -1).astype(np.uint8)


def _classes(root: Path, n: int = 6, hw: tuple[int, int] = (40, 50)) -> Path:
    """n images in two class folders, each a different gradient."""
    for i in range(n):
        folder = root / ("cat" if i % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.roll(_gradient(*hw), 7 * i, axis=1)).save(folder / f"{i:03d}.png")
    return root


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


# -- defect 3: a keep dataset's preview is what is stored --------------------------------------


@pytest.mark.parametrize("codec", ["raw", "jpeg"])
def test_preview_of_keep_shows_each_sample_at_its_stored_shape(tmp_path: Path, codec: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    Image.fromarray(_gradient(180, 320)).save(src / "wide.png")
    out = tmp_path / "ds"
    run_pack(src, out, sizes=[64], mode="keep", codec=codec, quality=95)
    res = preview(out, count=1, output=tmp_path / "sheet.png")
    sheet = np.asarray(Image.open(tmp_path / "sheet.png").convert("RGB")).astype(int)
    x, y = res.layout.origin(0)
    tile = sheet[y : y + 64, x : x + 64]
    # 180x320 kept at 64 px is 36x64: centred, rows 14..49, the rest the sheet's colour.
    assert (tile[:14] == SHEET_BG).all() and (tile[50:] == SHEET_BG).all()
    stored = _gradient(180, 320)[::5, ::5][:36, :64].astype(int)  # about what 1/5 gives
    assert np.abs(tile[14:50].mean((0, 1)) - stored.mean((0, 1))).max() < 8
    # Not a centre crop enlarged: the left and right ends of the gradient are both there.
    assert tile[14:50, 0, 0].mean() < 20 and tile[14:50, -1, 0].mean() > 230


# -- source paths ----------------------------------------------------------------------------


def test_image_sources_trace_shuffled_samples_back_to_their_files(tmp_path: Path) -> None:
    src = _classes(tmp_path / "src")
    out = tmp_path / "ds"
    run_pack(src, out, sizes=[32], shuffle_seed=3, shard_size=2)
    ds = ImageShardDataset(out, 32, ("image", "label"))
    names = [ds.source(i) for i in range(len(ds))]
    assert sorted(names) == sorted(p.relative_to(src).as_posix() for p in src.rglob("*.png"))
    assert names != sorted(names)  # shuffled, and still traceable
    for i, name in enumerate(names):
        assert name is not None and ds.classes[int(ds[i][1])] == name.split("/")[0]
    with pytest.raises(IndexError):
        ds.source(len(ds))
    with pytest.raises(ValueError, match="no field"):  # bytes, not a tensor: ds.source(i)
        ImageShardDataset(out, 32, ("image", "source"))


def test_preview_captions_hold_the_source(tmp_path: Path) -> None:
    src = _classes(tmp_path / "src")
    out = tmp_path / "ds"
    run_pack(src, out, sizes=[32])
    two = preview(out, output=tmp_path / "a.png").layout.caption
    _drop_sources(out)
    one = preview(out, output=tmp_path / "b.png").layout.caption
    assert two > one  # a second caption line: the source file


def test_a_changed_jpeg_sample_error_names_its_source(tmp_path: Path) -> None:
    src = _classes(tmp_path / "src", n=2)
    out = tmp_path / "ds"
    run_pack(src, out, sizes=[32], codec="jpeg")
    data = out / "image_32-00000.npy"
    off = np.load(out / "image_32-offsets-00000.npy")
    with open(data, "r+b") as f:  # bit rot in the middle of sample 1
        f.seek(data.stat().st_size - int(off[-1]) + int(off[1] + off[2]) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x55]))
    ds = ImageShardDataset(out, 32)
    with pytest.raises(FormatError, match=r"sample 1\), packed from dog/000\.png: .*checksum"):
        ds[1]


def _drop_sources(out: Path) -> None:
    """Make `out` what prep wrote before it stored sources."""

    def drop(d: dict[str, Any]) -> None:
        d["arrays"].pop("source")
        d["fields"].pop("source")
        for shard in d["shards"]:
            ref = shard["arrays"].pop("source")
            for file in (ref["file"], ref["offsets"]["file"]):
                shard["files"].pop(file)
                (out / file).unlink()

    edit_manifest(out, drop)


def test_datasets_without_sources_keep_loading(tmp_path: Path) -> None:
    src = _classes(tmp_path / "src", n=2)
    out = tmp_path / "ds"
    run_pack(src, out, sizes=[32])
    _drop_sources(out)
    ds = ImageShardDataset(out, 32, ("image", "label"))
    assert ds.source(0) is None and ds[1][0].shape == (3, 32, 32)
    assert preview(out, output=tmp_path / "s.png").tiles == 2


def test_document_sources_name_each_documents_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("one\ntwo\nthree\n")
    (src / "sub" / "b.txt").write_text("four\nfive\n")
    out = tmp_path / "tok"
    res = _invoke("tokenize", str(src), str(out), "--split-lines", "--val-fraction", "0", "-q")
    assert res.exit_code == 0, res.output
    ds = DocumentDataset(out, "train")
    assert [ds.source(i) for i in range(len(ds))] == ["a.txt"] * 3 + ["sub/b.txt"] * 2
    assert bytes(ds[3].tolist()).decode() == "four"


# -- transparent PNGs --------------------------------------------------------------------------


def _white_on_transparent(folder: Path, n: int = 3) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        rgba = np.zeros((40, 40, 4), np.uint8)
        rgba[10:30, 5 + i : 30 + i] = 255  # a white shape, opaque, on transparency
        Image.fromarray(rgba, "RGBA").save(folder / f"{i}.png")
    return folder


def test_transparent_pngs_look_blank_on_white_and_show_on_a_chosen_background(
    tmp_path: Path,
) -> None:
    src = _white_on_transparent(tmp_path / "src")
    white, dark = tmp_path / "white", tmp_path / "dark"
    assert _invoke("pack", str(src), str(white), "--sizes", "32", "-q").exit_code == 0
    res = _invoke("preview", str(white), "-o", str(tmp_path / "w.png"))
    assert res.exit_code == 0 and "3 of 3 look blank" in res.output and "--background" in res.output
    res = _invoke("pack", str(src), str(dark), "--sizes", "32", "--background", "0,0,64", "-q")
    assert res.exit_code == 0, res.output
    assert read_manifest(dark).extra["background"] == [0, 0, 64]
    img = ImageShardDataset(dark, 32, ("image",))[0][0].permute(1, 2, 0).numpy()
    assert (img[0, 0] == [0, 0, 64]).all() and (img[16, 16] == 255).all()
    res = _invoke("preview", str(dark), "-o", str(tmp_path / "d.png"))
    assert res.exit_code == 0 and "blank" not in res.output
    assert read_manifest(white).extra["background"] == [255, 255, 255]


@pytest.mark.parametrize("value", ["1,2", "0,0,256", "a,b,c"])
def test_a_bad_background_is_one_line(tmp_path: Path, value: str) -> None:
    src = _white_on_transparent(tmp_path / "src", 1)
    res = _invoke("pack", str(src), str(tmp_path / "out"), "--background", value, "-q")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "--background" in res.output


def test_one_colour_share() -> None:
    img = np.zeros((10, 10, 3), np.uint8)
    img[0, 0] = 1
    assert one_colour_share(img) == 0.99
    assert one_colour_share(np.arange(4, dtype=np.uint8).reshape(2, 2, 1)) == 0.25


# -- issue 23: preview and info open through the folder checks ---------------------------------


def test_preview_of_labels_beyond_the_classes_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    run_pack(_classes(tmp_path / "src"), out, sizes=[32])
    label = out / "label-00000.npy"
    with open(label, "r+b") as f:  # the last label: 250, with 2 classes
        f.seek(-1, 2)
        f.write(bytes([250]))
    res = _invoke("preview", str(out), "-o", str(tmp_path / "s.png"))
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "label 250 of label is not one of its classes" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_preview_of_a_missing_label_array_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    run_pack(_classes(tmp_path / "src"), out, sizes=[32])
    edit_manifest(out, lambda d: d["shards"][0]["arrays"].pop("label"))
    res = _invoke("preview", str(out), "-o", str(tmp_path / "s.png"))
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "label is declared in the manifest but has no file" in res.output
