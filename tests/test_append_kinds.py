"""--append through the CLI for every writing command that has it: half the inputs packed, the
other half appended (a class that sorts before the old ones among them), read back through the
dataset class and compared, sample by sample, with one pack of all the inputs; a second append
of the same inputs skips all; a differing option is one line and changes nothing."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from loaders import SampleDataset
from loaders.format import read_manifest
from prep.cli.main import app

Row = dict[str, Any]


def by_source(root: Path) -> dict[str, list[Row]]:
    """Each sample's arrays by its `source`, class ids as their names (ids may differ)."""
    ds = SampleDataset(root)
    fields = ds.store.manifest.fields
    out: dict[str, list[Row]] = {}
    for i in range(len(ds)):
        row: Row = {}
        for name, v in ds[i].items():
            a = v.numpy() if hasattr(v, "numpy") else v
            classes = (fields.get(name) or {}).get("classes")
            if classes:
                a = [classes[j] for j in np.asarray(a).reshape(-1).tolist()]
            row[name] = a
        out.setdefault(str(row["source"]), []).append(row)
    return out


def same(a: dict[str, list[Row]], b: dict[str, list[Row]]) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        assert len(a[key]) == len(b[key]), key
        for x, y in zip(a[key], b[key], strict=True):
            assert sorted(x) == sorted(y)
            for name in x:
                if isinstance(x[name], np.ndarray):
                    nan = x[name].dtype.kind == "f"  # a missing number: NaN in both
                    assert np.array_equal(x[name], y[name], equal_nan=nan), (key, name)
                else:
                    assert x[name] == y[name], (key, name)


@dataclass
class Case:
    """A command: `write(src, part)` adds input part 1 or 2 under `src`; `args(src, out)` its
    command line; `refused`: options that differ from the first pack's, and the line's words."""

    write: Callable[[Path, int], None]
    args: Callable[[Path, Path], list[str]]
    refused: tuple[list[str], str]
    inputs: tuple[int, int]  # inputs of part 1, of both parts
    read: Callable[[Path], dict[str, list[Row]]] = by_source  # the samples, comparable


def invoke(args: list[str]) -> Any:
    got = CliRunner().invoke(app, [*args, "-q"])
    return got


def check_case(case: Case, tmp_path: Path) -> None:
    src, out, whole = tmp_path / "src", tmp_path / "ds", tmp_path / "whole"
    case.write(src, 1)
    assert invoke(case.args(src, out)).exit_code == 0
    case.write(src, 2)
    got = invoke([*case.args(src, out), "--append"])
    assert got.exit_code == 0, got.output
    assert f"({case.inputs[0]} " in got.output and "already in the dataset)" in got.output
    assert invoke(case.args(src, whole)).exit_code == 0
    same(case.read(out), case.read(whole))
    grown, one = (json.loads((p / "manifest.json").read_text())["extra"] for p in (out, whole))
    for key in ("splits", "stats"):  # from the old shards' records and the new ones'
        assert grown.get(key) == one.get(key), key

    before = (out / "manifest.json").read_bytes()
    again = invoke([*case.args(src, out), "--append"])  # nothing new
    assert again.exit_code == 0 and f"({case.inputs[1]} " in again.output, again.output
    assert (out / "manifest.json").read_bytes() == before

    options, words = case.refused
    bad = invoke([*case.args(src, out), *options, "--append"])
    assert bad.exit_code == 1 and words in bad.output, bad.output
    assert "Traceback" not in bad.output and bad.output.count("cannot append") == 1
    assert (out / "manifest.json").read_bytes() == before


# ---- prep audio: class folders; "a" sorts before the first pack's "b" and "c"


def write_audio(src: Path, part: int) -> None:
    """Class folders (part 2 adds "a"), and --targets rows (part 2 adds the mood "calm")."""
    sf = pytest.importorskip("soundfile")
    names = ["b/0.wav", "c/1.wav", "b/2.wav", "a/3.wav", "c/4.wav"]
    moods = ["sad", "sad", "wry", "calm", "wry"]
    for i, name in enumerate(names[:3] if part == 1 else names[3:]):
        i += 3 * (part - 1)
        t = np.arange(800 + 160 * i) / 8000
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        sf.write(src / name, (0.3 * np.sin(2 * np.pi * (200 + 50 * i) * t)), 8000)
    rows = [f"{n},{moods[i]},{i * 2}" for i, n in enumerate(names[: 3 if part == 1 else 5])]
    (src.parent / "targets.csv").write_text("path,mood,size\n" + "\n".join(rows) + "\n")


AUDIO = Case(
    write_audio,
    lambda src, out: [
        "audio",
        str(src),
        str(out),
        "--mono",
        "--rate",
        "8000",
        "-j",
        "1",
        "--targets",
        str(src.parent / "targets.csv"),
    ],
    (["--rate", "22050"], "rate 22050 differs from the dataset's 8000"),
    (3, 5),
)


# ---- prep video: the demo's direction folders, part 2 a new direction and another clip


def write_video(src: Path, part: int) -> None:
    pytest.importorskip("av")
    from prep.demo.video import shape_frames, write_clip

    names = ["left/0.mp4", "up/1.mp4"] if part == 1 else ["down/2.mp4", "up/3.mp4"]
    for name in names:
        rng = np.random.default_rng(int(name[-5]))
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        write_clip(src / name, shape_frames(rng, name.split("/")[0], 6), None, 0)


VIDEO = Case(
    write_video,
    lambda src, out: ["video", str(src), str(out), "--fps", "4", "--size", "16", "-j", "1"],
    (["--size", "24"], "size 24 differs from the dataset's 16"),
    (2, 4),
)


# ---- prep import pairs: a CSV of image paths and captions that gains rows


def png(i: int) -> bytes:
    rng = np.random.default_rng(i)
    buf = io.BytesIO()
    PILImage.fromarray(rng.integers(0, 256, (12, 10 + i, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def write_pairs(src: Path, part: int) -> None:
    src.mkdir(parents=True, exist_ok=True)
    rows = range(4) if part == 1 else range(7)
    for i in rows[4:] if part == 2 else rows:
        (src / f"{i}.png").write_bytes(png(i))
    with open(src / "pairs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image", "caption"])
        w.writerows([f"{i}.png", f"caption {i}"] for i in rows)


PAIRS = Case(
    write_pairs,
    lambda src, out: ["import", "pairs", str(src / "pairs.csv"), str(out), "-j", "1"],
    (["--text-column", "image"], "text_column 'image' differs from the dataset's 'caption'"),
    (4, 7),
)


# ---- prep import webdataset: a folder of tars that gains a tar


def write_wds(src: Path, part: int) -> None:
    src.mkdir(parents=True, exist_ok=True)
    keys = range(3) if part == 1 else range(3, 5)
    with tarfile.open(src / f"part-{part}.tar", "w") as t:
        for i in keys:
            for ext, data in (("png", png(i)), ("cls", str(i % 2).encode()), ("txt", b"t%d" % i)):
                info = tarfile.TarInfo(f"k{i}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))


WDS = Case(
    write_wds,
    lambda src, out: ["import", "webdataset", str(src), str(out), "-j", "1"],
    (["--max-member-mb", "7"], "max_member_mb 7.0 differs from the dataset's"),
    (3, 5),
)


# ---- prep import hf: a Parquet folder whose split gains a file


def write_hf(src: Path, part: int) -> None:
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {
            "img": datasets.Image(),
            "y": datasets.ClassLabel(names=["cat", "dog", "emu"]),
            "f": datasets.Value("float32"),
        }
    )
    rows = range(3) if part == 1 else range(3, 6)
    data = {
        "img": [{"bytes": png(i), "path": None} for i in rows],
        "y": [i % 3 for i in rows],
        "f": [i / 4 for i in rows],
    }
    (src / "data").mkdir(parents=True, exist_ok=True)
    ds = datasets.Dataset.from_dict(data, features=features)
    ds.to_parquet(str(src / "data" / f"train-{part - 1:05d}-of-00002.parquet"))


HF = Case(
    write_hf,
    lambda src, out: ["import", "hf", str(src), str(out), "-j", "1"],
    (["--size", "8"], "sizes [8] differs from the dataset's [256]"),
    (3, 6),
)


# ---- prep import coco: the file gains images and a category whose id sorts first


def write_coco(src: Path, part: int) -> None:
    src.mkdir(parents=True, exist_ok=True)
    ids = range(1, 4) if part == 1 else range(1, 6)
    for i in ids[-2:] if part == 2 else ids:  # the old images stay as they were
        (src / f"{i}.png").write_bytes(png(i))
    cats = [{"id": 5, "name": "cat"}, {"id": 7, "name": "dog"}]
    cats += [{"id": 2, "name": "ant"}] if part == 2 else []  # "ant" is label 0 of the file
    anns = [
        {"id": 10 * i + k, "image_id": i, "category_id": c, "bbox": [1, 1, 4 + k, 5], "area": 9}
        for i in ids
        for k, c in enumerate([5, 7] if i < 4 else [2, 7])
    ]
    images = [{"id": i, "file_name": f"{i}.png", "height": 12, "width": 10 + i} for i in ids]
    data = {"images": images, "annotations": anns, "categories": cats}
    (src / "instances.json").write_text(json.dumps(data))


COCO = Case(
    write_coco,
    lambda src, out: ["import", "coco", str(src / "instances.json"), str(src), str(out), "-j", "1"],
    (["--size", "8"], "sizes [8] differs from the dataset's"),
    (3, 5),
)


# ---- prep tokenize: text files, a document a line, some in val


def write_text(src: Path, part: int) -> None:
    src.mkdir(parents=True, exist_ok=True)
    for i in range(3) if part == 1 else range(3, 5):
        lines = [f"file {i} line {j}: " + "abcde fghij " * (i + j) for j in range(4)]
        (src / f"{i}.txt").write_text("\n".join(lines) + "\n")


TEXT = Case(
    write_text,
    lambda src, out: ["tokenize", str(src), str(out), "--split-lines", "--val-fraction", "0.3"],
    (["--val-fraction", "0.5"], "val_fraction 0.5 differs from the dataset's 0.3"),
    (3, 5),
)


# ---- prep table: CSV files; a category value and a target class that sort first come later


def write_table(src: Path, part: int) -> None:
    src.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(part)
    cities = ["Bonn", "Essen", "Kiel"] + (["Aachen"] if part == 2 else [])
    classes = ["mid", "top"] + (["low"] if part == 2 else [])
    with open(src / ("ab"[part - 1] + ".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["n", "x", "city", "y"])
        for i in range(40):
            x = "" if i % 9 == 4 else f"{rng.normal(3, 2):.4f}"  # some missing
            w.writerow([int(rng.integers(0, 50)), x, rng.choice(cities), rng.choice(classes)])


def table_rows(root: Path) -> dict[str, list[Row]]:
    """Each split's rows as values: numbers, category and class names (codes may differ)."""
    from loaders import TableDataset

    out: dict[str, list[Row]] = {}
    for split in ("train", "val"):
        ds = TableDataset(root, split)
        cities, classes = ds.vocab["city"], ds.classes or []
        rows = []
        for i in range(len(ds)):
            x_num, x_cat, y = ds[i]
            rows.append(
                {
                    "num": x_num.numpy(),
                    "city": cities[int(x_cat[0]) - 2],  # codes 0, 1: missing, unseen
                    "y": classes[int(y)],
                }
            )
        out[split] = rows
    return out


TABLE = Case(
    write_table,
    lambda src, out: ["table", str(src), str(out), "--target", "y", "--val-fraction", "0.25"],
    (["--val-fraction", "0.5"], "val_fraction 0.5 differs from the dataset's 0.25"),
    (1, 2),
    table_rows,
)


# ---- prep volumes: NIfTI scans with a targets CSV whose class column gains a class


def write_volumes(src: Path, part: int) -> None:
    nib = pytest.importorskip("nibabel")
    grades = ["mid", "top", "mid", "bad", "top"]  # "bad" comes with part 2
    (src / "scans").mkdir(parents=True, exist_ok=True)
    for i in range(3) if part == 1 else range(3, 5):
        data = np.random.default_rng(i).integers(-50, 200, (6, 7, 4 + i)).astype(np.int16)
        nib.save(
            nib.Nifti1Image(data, np.diag([1.0, 1.5, 2.0, 1.0])), src / "scans" / f"s{i}.nii.gz"
        )
    rows = [f"s{i},{grades[i]},{i * 3}" for i in range(3 if part == 1 else 5)]
    (src / "targets.csv").write_text("scan,grade,count\n" + "\n".join(rows) + "\n")


def volume_rows(root: Path) -> dict[str, list[Row]]:
    """Each scan's voxels, geometry and targets (a class by its name), by its path."""
    ds = SampleDataset(root)
    m = ds.store.manifest
    grades = m.fields["volume_target_0"]["vocab"]
    out: dict[str, list[Row]] = {}
    for i, meta in enumerate(m.extra["volumes"]):
        s = ds[i]
        row = {k: np.asarray(v) for k, v in s.items() if k != "volume_target_0"}
        row["grade"] = grades[int(s["volume_target_0"])]
        row["affine"] = np.asarray(meta["affine"])
        out[meta["path"]] = [row]
    return out


VOLUMES = Case(
    write_volumes,
    lambda src, out: [
        "volumes",
        str(src / "scans"),
        str(out),
        "--targets",
        str(src / "targets.csv"),
        "--shard-size",
        "2",
        "-j",
        "1",
    ],
    (["--orient", "LPS"], "orient 'LPS' differs from the dataset's 'RAS'"),
    (3, 5),
    volume_rows,
)


@pytest.mark.parametrize(
    "case",
    [TEXT, VIDEO, PAIRS, WDS, HF],
    ids=["tokenize", "video", "pairs", "webdataset", "hf"],
)
def test_append_equals_one_pack_of_all(case: Case, tmp_path: Path) -> None:
    """(audio, coco, table and volumes: in the tests of their growing class lists below)"""
    check_case(case, tmp_path)


def test_audio_classes_grow_at_the_end(tmp_path: Path) -> None:
    """The new class "a" sorts first but gets the next id; old ids never change."""
    check_case(AUDIO, tmp_path)
    m = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert m["fields"]["label"]["classes"] == ["b", "c", "a"]
    whole = json.loads((tmp_path / "whole" / "manifest.json").read_text())
    assert whole["fields"]["label"]["classes"] == ["a", "b", "c"]
    assert m["fields"]["mood"]["classes"] == ["sad", "wry", "calm"]


def test_coco_categories_grow_at_the_end(tmp_path: Path) -> None:
    check_case(COCO, tmp_path)
    m = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert m["fields"]["labels"]["classes"] == ["cat", "dog", "ant"]


def write_photos(src: Path, part: int) -> int:
    """Noise photos and all-black ones (quality's `dark`); the black ones written."""
    names = ["a/0.png", "a/1.png", "b/2.png", "b/3.png"] if part == 1 else ["a/4.png", "b/5.png"]
    dark = {"b/3.png", "a/4.png", "b/5.png"}
    for name in names:
        rng = np.random.default_rng(int(name[-5]))
        hw = (24, 24 + 8 * int(name[-5]))
        pixels = rng.integers(0, 256, (*hw, 3), dtype=np.uint8) * (name not in dark)
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        PILImage.fromarray(pixels.astype(np.uint8)).save(src / name)
    return len(dark & set(names))


def test_quality_counts_old_and_new_shards(tmp_path: Path) -> None:
    """extra.quality after an append counts every shard's flagged samples, as one pack does."""
    src, out, whole = tmp_path / "src", tmp_path / "ds", tmp_path / "whole"
    args = ["pack", str(src), "--sizes", "16", "--shard-size", "2", "-j", "1"]
    dark = write_photos(src, 1)
    assert invoke([*args, str(out)]).exit_code == 0
    dark += write_photos(src, 2)
    got = invoke([*args, str(out), "--append"])
    assert got.exit_code == 0 and "(4 already in the dataset)" in got.output, got.output
    assert invoke([*args, str(whole)]).exit_code == 0
    grown, one = (json.loads((p / "manifest.json").read_text()) for p in (out, whole))
    assert grown["extra"]["quality"]["issues"]["dark"] == dark == 3
    assert grown["extra"]["quality"] == one["extra"]["quality"]


def test_tokenize_append_keeps_the_fitted_tokenizer(tmp_path: Path) -> None:
    """A bpe dataset grows with its own tokenizer (not one fitted on the new documents): the
    same tokens as one pack of all the documents with that tokenizer's file."""
    src, out, whole = tmp_path / "src", tmp_path / "ds", tmp_path / "whole"
    write_text(src, 1)
    args = ["--split-lines", "--val-fraction", "0"]
    assert (
        invoke(
            ["tokenize", str(src), str(out), "-t", "bpe", "--vocab-size", "300", *args]
        ).exit_code
        == 0
    )
    fitted = (out / "tokenizer.json").read_bytes()
    write_text(src, 2)
    got = invoke(["tokenize", str(src), str(out), "--append"])
    assert got.exit_code == 0 and "(3 already in the dataset)" in got.output, got.output
    assert (out / "tokenizer.json").read_bytes() == fitted
    (tmp_path / "tok.json").write_bytes(fitted)
    got = invoke(["tokenize", str(src), str(whole), "-t", str(tmp_path / "tok.json"), *args])
    assert got.exit_code == 0, got.output
    same(by_source(out), by_source(whole))


def test_table_statistics_and_vocabularies_grow(tmp_path: Path) -> None:
    """Mean and std over all train rows (as one pack of all computes them, and as numpy does
    from the stored values); old codes kept, new values after them."""
    check_case(TABLE, tmp_path)
    grown, whole = (
        json.loads((tmp_path / p / "manifest.json").read_text()) for p in ("ds", "whole")
    )
    for name in ("num_0", "num_1"):
        a, b = grown["fields"][name], whole["fields"][name]
        assert (a["lo"], a["hi"], a["missing"], a["dtype"]) == (
            b["lo"],
            b["hi"],
            b["missing"],
            b["dtype"],
        )
        assert np.isclose(a["mean"], b["mean"], rtol=1e-12) and np.isclose(
            a["std"], b["std"], rtol=1e-12
        )
    x = np.stack([r["num"] for r in table_rows(tmp_path / "ds")["train"]])
    assert np.allclose(
        [grown["fields"]["num_1"]["mean"], grown["fields"]["num_1"]["std"]],
        [np.nanmean(x[:, 1].astype(np.float64)), np.nanstd(x[:, 1].astype(np.float64))],
        rtol=1e-6,
    )
    city = grown["fields"]["cat_0"]
    assert city["vocab"] == ["Bonn", "Essen", "Kiel", "Aachen"]
    assert whole["fields"]["cat_0"]["vocab"] == ["Aachen", "Bonn", "Essen", "Kiel"]
    one = whole["fields"]["cat_0"]
    counts = dict(zip(one["vocab"], one["counts"], strict=True))
    assert dict(zip(city["vocab"], city["counts"], strict=True)) == counts
    assert grown["fields"]["target"]["vocab"] == ["mid", "top", "low"]


def test_volume_target_classes_grow_at_the_end(tmp_path: Path) -> None:
    check_case(VOLUMES, tmp_path)
    m = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert m["fields"]["volume_target_0"]["vocab"] == ["mid", "top", "bad"]
    assert [v["path"] for v in m["extra"]["volumes"]] == [f"s{i}.nii.gz" for i in range(5)]


def test_a_failed_table_append_is_finished_by_resume(tmp_path: Path) -> None:
    """An append stopped by --max-rejects (its shards written) is finished by --resume with a
    higher limit, its shards reused: the rows of an unbroken append."""
    src, out, straight = tmp_path / "src", tmp_path / "ds", tmp_path / "straight"
    write_table(src, 1)
    args = ["--target", "y", "--val-fraction", "0.25", "--shard-rows", "16"]
    for root in (out, straight):
        assert invoke(["table", str(src), str(root), *args]).exit_code == 0
    write_table(src, 2)
    with open(src / "b.csv", "a") as f:
        f.write("1,2\n" * 6)  # rows of two fields: rejected
    stopped = invoke(["table", str(src), str(out), "--append"])
    assert stopped.exit_code == 1 and "--max-rejects" in stopped.output, stopped.output
    assert (tmp_path / "ds.partial").is_dir()
    same(table_rows(out), table_rows(straight))  # the dataset as it was
    done = invoke(["table", str(src), str(out), "--append", "--resume", "--max-rejects", "0.2"])
    assert done.exit_code == 0 and "(0 reused)" not in done.output, done.output
    got = invoke(["table", str(src), str(straight), "--append", "--max-rejects", "0.2"])
    assert got.exit_code == 0, got.output
    same(table_rows(out), table_rows(straight))
    assert len(read_manifest(out).shards) == len(read_manifest(straight).shards) > 3


def test_an_importer_append_takes_the_dataset_options(tmp_path: Path) -> None:
    """Options left out take the dataset's, also where an importer builds its fields from
    them before the run (the image's size)."""
    src, out = tmp_path / "src", tmp_path / "ds"
    write_pairs(src, 1)
    assert invoke([*PAIRS.args(src, out), "--size", "32"]).exit_code == 0
    write_pairs(src, 2)
    got = invoke(["import", "pairs", str(src / "pairs.csv"), str(out), "--append"])
    assert got.exit_code == 0 and "3 packed" in got.output, got.output
    m = read_manifest(out)
    assert m.num_samples == 7 and m.config["sizes"] == [32]
    assert {tuple(SampleDataset(out)[i]["image"].shape) for i in range(7)} == {(3, 32, 32)}


def test_tokenize_append_repacks_the_sequences(tmp_path: Path) -> None:
    """A dataset with --pack plans (its packing/ folder) takes an append, and its plans are
    those of one pack of all the documents."""
    src, out, whole = tmp_path / "src", tmp_path / "ds", tmp_path / "whole"
    args = ["--split-lines", "--val-fraction", "0", "--pack", "32"]
    write_text(src, 1)
    assert invoke(["tokenize", str(src), str(out), *args]).exit_code == 0
    write_text(src, 2)
    got = invoke(["tokenize", str(src), str(out), "--append"])
    assert got.exit_code == 0 and "train packed into" in got.output, got.output
    assert invoke(["tokenize", str(src), str(whole), *args]).exit_code == 0
    plans = [np.load(root / "packing" / "train-32.npz") for root in (out, whole)]
    for key in ("starts", "doc", "offset", "length"):
        assert np.array_equal(plans[0][key], plans[1][key]), key


def test_a_table_append_whose_rows_need_a_wider_dtype_is_refused(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "ds"
    write_table(src, 1)
    assert invoke(TABLE.args(src, out)).exit_code == 0
    before = (out / "manifest.json").read_bytes()
    (src / "b.csv").write_text("n,x,city,y\n100000,1.5,Bonn,top\n")  # n was uint8
    got = invoke([*TABLE.args(src, out), "--append"])
    assert got.exit_code == 1 and got.output.count("\n") == 1, got.output
    assert "column n of all the rows is int stored as uint32, the dataset stores int as uint8" in (
        got.output
    )
    assert (out / "manifest.json").read_bytes() == before


KILLER = """
import os, signal
from prep.kinds.text import tokenize as t
real = t.TextKind.task
def dying(*args):
    record = real(*args)
    os.kill(os.getpid(), signal.SIGKILL)  # after the first new shard is written
    return record
t.TextKind.task = staticmethod(dying)
from prep.cli.main import app
app({args!r})
"""


@pytest.mark.slow  # a fresh interpreter: 3-6 s
def test_a_killed_tokenize_append_is_finished_by_resume(tmp_path: Path) -> None:
    """kill -9 in the middle of an append, then the same command with --resume: the new shard
    written before the kill is reused, and the files are those of an unbroken append."""
    import subprocess
    import sys

    src, out, straight = tmp_path / "src", tmp_path / "ds", tmp_path / "straight"
    write_text(src, 1)
    first = ["--split-lines", "--val-fraction", "0.3", "--shard-mb", "0.0001"]
    for root in (out, straight):
        assert invoke(["tokenize", str(src), str(root), *first]).exit_code == 0
    write_text(src, 2)
    assert invoke(["tokenize", str(src), str(straight), "--append"]).exit_code == 0
    args = ["tokenize", str(src), str(out), "--append", "--backend", "threads", "-q"]
    code, repo = KILLER.format(args=args), Path(__file__).parents[1]  # this checkout's prep
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, timeout=120)
    assert proc.returncode == -9 and (tmp_path / "ds.partial").is_dir()
    assert read_manifest(out).num_samples == 12  # the dataset as it was: 3 files of 4 lines
    done = invoke(["tokenize", str(src), str(out), "--append", "--resume"])
    assert done.exit_code == 0 and "(1 reused)" in done.output, done.output
    same(by_source(out), by_source(straight))
    assert files(out) == files(straight)


def files(root: Path) -> dict[str, bytes]:
    """A dataset's files, its manifest without what names its folder (OUT, the parent)."""
    got = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file() and p.name != "README.md"}
    m = json.loads(got.pop("manifest.json"))
    m["config"].pop("out"), m.pop("parent")
    return got | {"manifest": json.dumps(m, sort_keys=True).encode()}
