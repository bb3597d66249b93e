"""`prep import pairs`: captions come back byte-equal to an independent read of the source
(CSV, JSONL, Parquet with image bytes), tokens with --tokenizer, and every bad pair is a reject:
a missing or broken image, an empty caption unless --allow-empty; a wrong column exits 2."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from loaders import SampleDataset
from prep.cli.main import app

CAPTIONS = ['a "quoted", comma café', "東京 の データ 🙂", "  spaces kept  ", "line one\nline two"]


def image_bytes(i: int) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(np.full((20 + i, 30, 3), 40 * i, np.uint8)).save(out, format="PNG")
    return out.getvalue()


def write_images(root: Path) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(len(CAPTIONS)):
        (root / f"{i}.png").write_bytes(image_bytes(i))
    return [f"{i}.png" for i in range(len(CAPTIONS))]


def run_import(src: Path, out: Path, *args: str) -> Any:
    base = ["import", "pairs", str(src), str(out), "-q", "--jobs", "1", "--sizes", "16"]
    return CliRunner().invoke(app, [*base, *args])


def captions(out: Path) -> list[str]:
    ds = SampleDataset(out, fields=("caption",))
    return list(ds.__getitems__(list(range(len(ds))))["caption"])


def test_csv_captions_come_back_byte_equal(tmp_path: Path) -> None:
    names = write_images(tmp_path / "imgs")
    src = tmp_path / "pairs.csv"
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["path", "caption"])
        w.writerows([[f"imgs/{n}", c] for n, c in zip(names, CAPTIONS, strict=True)])
    result = run_import(src, tmp_path / "ds", "--image-column", "path")
    assert result.exit_code == 0, result.output
    with open(src, newline="", encoding="utf-8") as f:
        want = [row["caption"] for row in csv.DictReader(f)]
    got = captions(tmp_path / "ds")
    assert [g.encode() for g in got] == [c.encode() for c in want]
    ds = SampleDataset(tmp_path / "ds", fields=("image",))
    assert ds.__getitems__([3])["image"].shape == (1, 3, 16, 16)
    assert [ds.source(i) for i in range(len(ds))] == [f"imgs/{n}" for n in names]  # the paths


def test_parquet_bytes_and_tokens(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "line": 1, "one": 2, "two": 3}, "[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tok.json"))
    # Hugging Face writes an Image feature as a struct of bytes and path.
    jpg = [{"bytes": image_bytes(i), "path": None} for i in range(4)]
    table = {"jpg": jpg, "text": CAPTIONS}
    pq.write_table(pa.table(table), tmp_path / "pairs.parquet")
    args = [
        "--image-column",
        "jpg",
        "--text-column",
        "text",
        "--tokenizer",
        str(tmp_path / "tok.json"),
    ]
    result = run_import(tmp_path / "pairs.parquet", tmp_path / "ds", *args)
    assert result.exit_code == 0, result.output
    want = pq.read_table(tmp_path / "pairs.parquet").column("text").to_pylist()
    assert captions(tmp_path / "ds") == want
    ds = SampleDataset(tmp_path / "ds", fields=("tokens",), ragged="list")
    assert ds.__getitems__([3])["tokens"][0].tolist() == [1, 2, 1, 3]
    assert ds.source(3) == "pairs.parquet:3"  # an image given as bytes: the row
    assert (tmp_path / "ds" / "tokens.tokenizer.json").is_file()


@pytest.mark.parametrize("allow", [False, True])
def test_bad_pairs_are_rejects_and_empty_captions(tmp_path: Path, allow: bool) -> None:
    names = write_images(tmp_path)
    noise = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    jpeg = io.BytesIO()
    PILImage.fromarray(noise).save(jpeg, format="JPEG")
    (tmp_path / "broken.png").write_bytes(jpeg.getvalue()[: len(jpeg.getvalue()) // 2])
    rows = [{"image": n, "caption": c} for n, c in zip(names, CAPTIONS, strict=True)]
    rows += [
        {"image": "gone.png", "caption": "missing image"},
        {"image": "broken.png", "caption": "truncated image"},
        {"image": names[0], "caption": ""},
        {"image": names[1], "caption": None},
    ]
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    args = ["--max-rejects", "0.6", *(["--allow-empty"] if allow else [])]
    result = run_import(src, tmp_path / "ds", *args)
    assert result.exit_code == 0, result.output
    rejects = [json.loads(line) for line in (tmp_path / "ds" / "rejects.jsonl").open()]
    reasons = {r["path"]: r["reason"] for r in rejects}
    want = {"pairs.jsonl:5": "missing", "pairs.jsonl:6": "truncated"}
    if not allow:
        want |= {"pairs.jsonl:7": "empty_caption", "pairs.jsonl:8": "empty_caption"}
    assert reasons == want
    gone = next(r["message"] for r in rejects if r["path"] == "pairs.jsonl:5")
    assert "image gone.png" in gone and "HINT" in gone and "\n" not in gone
    assert captions(tmp_path / "ds") == CAPTIONS + (["", ""] if allow else [])


def test_a_column_that_is_not_there_exits_2(tmp_path: Path) -> None:
    names = write_images(tmp_path)
    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps({"file": names[0], "caption": "x"}) + "\n")
    result = run_import(src, tmp_path / "ds")
    assert result.exit_code == 2
    assert "--image-column image" in result.output and "file, caption" in result.output
