"""How the fixtures in tests/legacy/packed/ were made: prep at commit b05b3c5 (main, before
issue 35 moved every command onto one format), run once by hand from the repository root:

    PYTHONPATH=$PWD .venv/bin/python tests/legacy/make_fixtures.py

Each folder of packed/ is a tiny dataset written by that code's own CLI (in this process, with
typer's CliRunner, from relative paths so that the manifests name no machine's folders): image
packs (format version 2, and images-v1-rewritten: one rewritten to version 1 as
tests/test_jpeg.py makes one), token, volume and table packs (version 2), and samples datasets
(version 3: `prep samples`, the four importers, `prep audio`, `prep video`). The folders named
KIND-v1 were packed by the last code that wrote format version 1 (V1_COMMIT, the parent of
373c419 "Format version 2"), taken from this repository's history with `git archive`.
expected.json holds what b05b3c5's dataset classes returned for the reads of
tests/test_legacy_formats.py (CASES): dtypes, shapes and the sha256 of every tensor's bytes.

Kept for the record, never run by the tests: rerun after the format changed and it would write
the new code's datasets, which is not what the fixtures are for. The raw inputs are synthetic
(prep.demo.images and the helpers below) and live in a temporary folder only.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository
PACKED = HERE / "packed"
EXPECTED = HERE / "expected.json"
V1_COMMIT = "438fb1fffb15f79744c2dd9cb462a05b14c5dedd"  # the last to write format version 1

# A recipe of every field kind `prep samples` has that is cheap at this size (recipes/detection.py
# plus a mask, boxes and keypoints placed with the image, a label, a scalar, a fixed array,
# bytes and tokens); written into the work folder and run by `prep samples --recipe`.
RECIPE = """
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

from prep.fields import (Array, Boxes, Bytes, Image, Instances, Json, Keypoints, Label, Mask,
                         Scalar, Text, Tokens)

CLASSES = ("circle", "square", "triangle", "cross")
HERE = Path(__file__).parent  # the demo folder: paths in the rows are relative to it

FIELDS = {
    "image": Image(sizes=(32, 20), mode="keep", codec="jpeg"),
    "mask": Mask(image="image"),
    "boxes": Boxes(image="image"),
    "points": Keypoints(image="image", joints=2),
    "shapes": Instances(image="image"),
    "labels": Array("int64", (None,)),
    "y": Label(classes=CLASSES),
    "score": Scalar("float32"),
    "embedding": Array("float16", (3,)),
    "caption": Text(),
    "tokens": Tokens("raw/demo/tokenizer.json"),  # relative to the run's folder
    "meta": Json(),
    "blob": Bytes(),
}


def make(row):
    h, w = row["height"], row["width"]
    mask_path = row["path"].replace("images/", "masks/", 1).rsplit(".", 1)[0] + ".png"
    mask = np.asarray(PILImage.open(HERE / mask_path))
    x0, y0, x1, y1 = np.asarray(row["boxes"], np.float64)[0] * [w, h, w, h]
    boxes = np.asarray([[x0, y0, x1, y1], [0, 0, w / 2, h / 2]], np.float32)
    points = np.asarray([[[x0, y0, 2], [x1, y1, 1]], [[w / 4, h / 4, 2], [0, 0, 0]]], np.float32)
    quarter = np.zeros((h, w), np.uint8)
    quarter[: h // 2, : w // 2] = 1
    label = CLASSES.index(row["labels"][0])
    return {
        "image": row["path"],
        "mask": mask_path,
        "boxes": boxes,
        "points": points,
        "shapes": np.stack([(mask > 0).astype(np.uint8), quarter]),
        "labels": np.asarray([label, 0], np.int64)[: 1 + row["id"] % 2],
        "y": row["labels"][0],
        "score": np.float32(row["id"] / 3),
        "embedding": np.asarray([row["id"], -0.5, 1e-3], np.float16),
        "caption": row["caption"] + " \\u00e9\\u2603",
        "tokens": row["caption"],
        "meta": {"id": row["id"], "size": [h, w], "tags": None if row["id"] % 2 else ["a"]},
        "blob": bytes(range(row["id"] * 3)),
    }
"""

# Text for the token packs: short documents, some non-ASCII, one empty, one with CRLF.
DOCS = [
    "the quick brown fox jumps over the lazy dog\n",
    "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, na\u00efve r\u00e9sum\u00e9\n",
    "",
    "line one\r\nline two\r\nline three\r\n",
    "snowman \u2603 and a rocket \U0001f680 in one document\n",
    "abcabcabcabc abcabc abc\n" * 3,
    "zero one two three four five six seven eight nine\n",
    "a last document without a final newline",
]

TABLE = """id,rooms,area,built,city,garden,price,grade
1,3,52.5,2001-04-03,Lima,true,120.5,low
2,4,,1999-12-31,Kyoto,false,180.0,high
3,2,40.25,,Lima,true,95.0,low
4,5,110.0,2015-06-01T12:30:00,,false,310.75,high
5,1,28.0,1987-01-15,Oslo,true,70.0,mid
6,3,61.5,2003-09-09,Kyoto,,150.0,mid
7,4,85.0,2010-02-28,Lima,false,205.25,high
8,2,,1995-07-04,Oslo,true,88.0,low
9,6,140.5,2020-11-11,Kyoto,true,420.0,high
10,3,58.0,2008-03-03,Quito,false,131.0,mid
11,2,39.5,1990-05-05,Lima,false,90.5,low
12,4,92.0,2012-12-12,Oslo,true,240.0,high
13,3,,2005-08-20,Kyoto,true,160.0,mid
14,5,120.0,2018-01-01,Lima,false,350.0,high
"""

VOLUME_TARGETS = """scan,dose,grade
ct_000,1.5,low
ct_001.nii.gz,2.25,high
ct_002,0.5,low
ct_dicom,3,high
"""


def cli(work: Path, *args: str) -> None:
    """One prep command, as a user runs it, from `work` (the manifests keep relative paths)."""
    from typer.testing import CliRunner

    from prep.cli.main import app

    here = Path.cwd()
    os.chdir(work)
    try:
        result = CliRunner().invoke(app, [*args, "-q"], catch_exceptions=False)
    finally:
        os.chdir(here)
    if result.exit_code != 0:
        sys.exit(f"prep {' '.join(args)} exited {result.exit_code}:\n{result.output}")


def write_inputs(raw: Path) -> None:
    """Every raw input of the packs, small and synthetic, under `raw`."""
    import nibabel  # noqa: F401  (make_phantoms' NIfTI writer: fail early when it is missing)
    import soundfile as sf

    from prep.demo.audio import synth
    from prep.demo.images import make_demo
    from prep.demo.video import shape_frames, write_clip
    from prep.demo.volumes import make_phantoms

    # images (class folders, 64 px photos of four kinds: JPEG, PNG, gray, EXIF-rotated), masks,
    # detection.jsonl, coco.json, captions.csv, hf/ Parquet, wds/ tars, tree/{train,val}
    make_demo(raw / "demo", count=12, seed=0, jobs=1, max_side=64, show_progress=False)
    demo = raw / "demo"
    # integer labels from a list, no class names (7 is past the others: classes 0..7)
    paths = sorted((demo / "images").rglob("*.*"))
    rows = [f"images/{p.relative_to(demo / 'images').as_posix()},{[0, 3, 7][i % 3]}"
            for i, p in enumerate(paths[:8])]  # fmt: skip
    (demo / "list.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    # samples: the detection rows, the recipe beside them (mask paths are relative to the list)
    (demo / "recipe.py").write_text(RECIPE)

    (raw / "text").mkdir()
    for i, doc in enumerate(DOCS):
        (raw / "text" / f"doc{i}.txt").write_bytes(doc.encode())
    (raw / "lines.txt").write_text("".join(d for d in DOCS if d), encoding="utf-8")
    (raw / "table.csv").write_text(TABLE)

    make_phantoms(raw / "ct", count=3, seed=0, side=8, dicom=True)
    (raw / "ct" / "targets.csv").write_text(VOLUME_TARGETS)

    rng = np.random.default_rng(0)
    for name, kind, rate, seconds, stereo in [
        ("tone/a.wav", "tone", 8000, 0.2, False),
        ("tone/b.flac", "tone", 22050, 0.3, True),
        ("noise/c.wav", "noise", 16000, 0.2, False),
        ("noise/d.wav", "noise", 8000, 0.15, True),
        ("chirp/e.wav", "chirp", 11025, 0.25, False),
    ]:
        x = synth(kind, rate, seconds, rng)
        if stereo:
            x = np.stack([x, np.roll(x, 5) * 0.5], axis=1)
        (raw / "audio" / name).parent.mkdir(parents=True, exist_ok=True)
        sf.write(raw / "audio" / name, x, rate)
    targets = "path,loudness,kind\ntone/a,0.5,x\ntone/b.flac,1.25,y\nnoise/c,2,x\nnoise/d,0.75,y\n"
    (raw / "audio-targets.csv").write_text(targets + "chirp/e.wav,1,x\n")

    for direction, n, times in [("left", 10, None), ("right", 7, [0, 90, 150, 260, 300, 420, 500])]:
        (raw / "video" / direction).mkdir(parents=True)
        frames = shape_frames(rng, direction, n)
        write_clip(raw / "video" / direction / "clip.mp4", frames, times)


def pack_all(work: Path) -> None:
    """Every fixture into work/out/NAME, through the CLI (raw inputs under work/raw)."""
    demo = "raw/demo"
    run = lambda *args: cli(work, *args)  # noqa: E731

    # images, version 2
    run("pack", f"{demo}/images", "out/images-raw", "--sizes", "24,16", "--masks",
        f"{demo}/masks", "--shard-size", "5", "-j", "1")  # fmt: skip
    run("pack", f"{demo}/images", "out/images-jpeg", "--sizes", "32,16", "--codec", "jpeg,raw",
        "--masks", f"{demo}/masks", "--mode", "fit", "--shard-size", "5", "-j", "1")  # fmt: skip
    run("pack", f"{demo}/images", "out/images-keep", "--sizes", "32,20", "--codec", "jpeg,raw",
        "--mode", "keep", "--masks", f"{demo}/masks", "--quality", "95", "--shard-size", "5",
        "-j", "1")  # fmt: skip
    run("pack", f"{demo}/images", "out/images-keep-raw", "--sizes", "24", "--mode", "keep",
        "--no-hashes", "--shard-size", "7", "-j", "1")  # fmt: skip
    run("pack", f"{demo}/tree", "out/images-gray-splits", "--gray", "--sizes", "24,16",
        "--codec", "jpeg,raw", "--splits", "train,val", "--mode", "stretch", "--shard-size", "4",
        "-j", "1")  # fmt: skip
    run("pack", f"{demo}/images", "out/images-h5", "--sizes", "16", "--format", "h5",
        "--val-fraction", "0.5", "--masks", f"{demo}/masks", "--shuffle-seed", "3",
        "--shard-size", "4", "-j", "1")  # fmt: skip
    run("pack", f"{demo}/list.csv", "out/images-int-labels", "--sizes", "16", "--no-hashes",
        "--shard-size", "3", "-j", "1")  # fmt: skip
    # images, version 1: packed without hashes, then its manifest rewritten (tests/test_jpeg.py)
    run("pack", f"{demo}/images", "out/images-v1-rewritten", "--sizes", "24,16", "--masks",
        f"{demo}/masks", "--no-hashes", "--shard-size", "5", "-j", "1")  # fmt: skip
    to_version_1(work / "out" / "images-v1-rewritten")

    # tokens, version 2 (tiny shards: --shard-mb of about 100 bytes)
    run("tokenize", "raw/text", "out/tokens-bytes", "--tokenizer", "bytes", "--val-fraction",
        "0.5", "--shard-mb", "0.0001", "-j", "1")  # fmt: skip
    run("tokenize", "raw/lines.txt", "out/tokens-char", "--tokenizer", "char", "--split-lines",
        "--val-fraction", "0.5", "--shard-mb", "0.0001", "-j", "1")  # fmt: skip
    run("tokenize", "raw/text", "out/tokens-bpe", "--tokenizer", "bpe", "--vocab-size", "270",
        "--val-fraction", "0.5", "-j", "1")  # fmt: skip
    shutil.copy(work / "out" / "tokens-bpe" / "tokenizer.json", work / demo / "tokenizer.json")

    # volumes, version 2: three NIfTI phantoms stored LPS and a DICOM series
    run("volumes", "raw/ct/images", "out/volumes", "--labels", "raw/ct/labels", "--targets",
        "raw/ct/targets.csv", "--shard-size", "2", "-j", "1")  # fmt: skip
    run("volumes", "raw/ct/images", "out/volumes-window", "--window", "-1000,400", "--spacing",
        "2,2,3", "--crop-foreground", "--margin", "1", "--shard-size", "3", "-j", "1")  # fmt: skip

    # table, version 2
    run("table", "raw/table.csv", "out/table", "--target", "grade", "--categorical", "rooms",
        "--missing-mask", "--val-fraction", "0.3", "--key", "id", "--shard-rows", "5",
        "-j", "1")  # fmt: skip
    run("table", "raw/table.csv", "out/table-float16", "--target", "price", "--drop", "id",
        "--float16", "--shard-rows", "8", "-j", "1")  # fmt: skip

    # samples, version 3
    run("samples", f"{demo}/detection.jsonl", "out/samples", "--recipe", f"{demo}/recipe.py",
        "--shard-size", "4", "--limit", "8", "-j", "1")  # fmt: skip
    run("import", "coco", f"{demo}/coco.json", f"{demo}/images", "out/import-coco", "--sizes",
        "24,16", "--masks", "--instances", "--shard-size", "5", "-j", "1")  # fmt: skip
    run("import", "pairs", f"{demo}/captions.csv", "out/import-pairs", "--image-column", "path",
        "--text-column", "caption", "--tokenizer", f"{demo}/tokenizer.json", "--sizes", "16",
        "--mode", "keep", "--codec", "jpeg", "--format", "h5", "--shard-size", "5",
        "--limit", "8", "-j", "1")  # fmt: skip
    run("import", "hf", f"{demo}/hf", "out/import-hf", "--sizes", "16", "--shard-size", "4",
        "-j", "1")  # fmt: skip
    run("import", "webdataset", f"{demo}/wds", "out/import-wds", "--sizes", "16", "--mode",
        "fit", "--shard-size", "4", "-j", "1")  # fmt: skip
    run("audio", "raw/audio", "out/audio", "--rate", "8000", "--mono", "--max-seconds", "0.15",
        "--shard-size", "2", "-j", "1")  # fmt: skip
    run("audio", "raw/audio", "out/audio-stereo", "--rate", "4000", "--dtype", "float16",
        "--targets", "raw/audio-targets.csv", "--format", "h5", "-j", "1")  # fmt: skip
    run("video", "raw/video", "out/video-raw", "--fps", "8", "--size", "16", "--shard-size", "1",
        "-j", "1")  # fmt: skip
    run("video", "raw/video", "out/video-jpeg", "--fps", "6", "--size", "24", "--mode", "fill",
        "--codec", "jpeg", "--max-frames", "3", "-j", "1")  # fmt: skip


def pack_version_1(work: Path) -> None:
    """The four kinds of format version 1, packed by V1_COMMIT's CLI (in a process of its own,
    its tree on PYTHONPATH) into work/out/KIND-v1."""
    code = work / "v1-code"
    tree = subprocess.run(["git", "-C", str(ROOT), "archive", V1_COMMIT], capture_output=True)
    if tree.returncode:
        sys.exit(f"git archive {V1_COMMIT}: {tree.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(tree.stdout)) as tar:
        tar.extractall(code, filter="data")
    env = {**os.environ, "PYTHONPATH": str(code)}
    for args in [
        ["pack", "raw/demo/images", "out/images-v1", "--sizes", "24,16", "--masks",
         "raw/demo/masks", "--shard-size", "5"],
        ["tokenize", "raw/text", "out/tokens-v1", "--tokenizer", "char", "--val-fraction", "0.5",
         "--shard-mb", "0.0001"],
        ["volumes", "raw/ct/images", "out/volumes-v1", "--labels", "raw/ct/labels",
         "--shard-size", "2"],
        ["table", "raw/table.csv", "out/table-v1", "--target", "grade", "--missing-mask",
         "--val-fraction", "0.3", "--key", "id", "--shard-rows", "5"],
    ]:  # fmt: skip
        cmd = [sys.executable, "-c", "from prep.cli.main import app; app()", *args, "-j", "1", "-q"]
        done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"prep {' '.join(args)} at {V1_COMMIT[:7]}: {done.stdout}{done.stderr}")


def to_version_1(root: Path) -> None:
    """An image dataset as format version 1 wrote it: no codec keys, no `source` array (the
    rewrite of tests/test_jpeg.py::test_a_version_1_dataset_still_loads), its files removed."""
    manifest = root / "manifest.json"
    d = json.loads(manifest.read_text())
    d["format_version"] = 1
    d["arrays"].pop("source")
    for spec in d["arrays"].values():
        spec.pop("codec")
    for shard in d["shards"]:
        source = shard["arrays"].pop("source")
        for ref in shard["arrays"].values():
            ref.pop("offsets")
        for name in (source["file"], source["offsets"]["file"]):
            shard["files"].pop(name)
            (root / name).unlink()
    manifest.write_text(json.dumps(d, indent=1) + "\n")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_inputs(work / "raw")
        pack_all(work)
        pack_version_1(work)
        if PACKED.exists():
            shutil.rmtree(PACKED)
        PACKED.mkdir()
        for folder in sorted((work / "out").iterdir()):
            shutil.copytree(folder, PACKED / folder.name)
    write_expected()


def write_expected() -> None:
    """expected.json: what today's dataset classes return for each case of the test."""
    sys.path.insert(0, str(ROOT))
    from tests.test_legacy_formats import CASES, observe

    cases = []
    for case_id, case in CASES.items():  # one line a read: small, and diffs name the read
        seen = observe(PACKED, case)
        lines = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in seen.items()]
        cases.append(f" {json.dumps(case_id)}: {{\n" + ",\n".join(lines) + "\n }")
    EXPECTED.write_text("{\n" + ",\n".join(cases) + "\n}\n")


if __name__ == "__main__":
    main()
