"""A malformed source is one line naming the file, never a traceback: JSON nested too deep or
holding a 5000-digit integer in a COCO file, a pairs .jsonl (naming the row), an HF
dataset_dict.json or state.json; HF features without their keys (exit 2 naming the column).
And one or two rejects are named on the line that counts them, for every command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from prep.cli.main import app

DEEP = "[" * 100_000 + "]" * 100_000  # beyond what the JSON parser's recursion takes
HUGE = "1" * 5000  # more digits than Python turns into an int (4300)


def prep(*args: str) -> Any:
    return CliRunner().invoke(app, [*args, "-q", "--jobs", "1", "--sizes", "8"])


def one_line(res: Any, code: int, *said: str) -> None:
    """Exit `code` with one `error:` line holding each of `said`, no traceback."""
    assert isinstance(res.exception, SystemExit) and res.exit_code == code, res.output
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output
    for s in said:
        assert s in res.output, res.output


@pytest.mark.parametrize("text", [DEEP, '{"images": [{"id": ' + HUGE + "}]}"], ids=["deep", "huge"])
def test_coco_json_deep_or_huge_is_one_line(text: str, tmp_path: Path) -> None:
    (tmp_path / "coco.json").write_text(text)
    res = prep("import", "coco", str(tmp_path / "coco.json"), str(tmp_path), str(tmp_path / "o"))
    one_line(res, 1, "coco.json: cannot read it as JSON")


@pytest.mark.parametrize("text", [DEEP, '{"image": ' + HUGE + "}"], ids=["deep", "huge"])
def test_pairs_jsonl_bad_row_is_one_line_naming_it(text: str, tmp_path: Path) -> None:
    PILImage.new("RGB", (8, 8)).save(tmp_path / "a.png")
    ok = json.dumps({"image": "a.png", "caption": "fine"})
    (tmp_path / "pairs.jsonl").write_text(f"{ok}\n{text}\n{ok}\n")
    res = prep("import", "pairs", str(tmp_path / "pairs.jsonl"), str(tmp_path / "o"))
    one_line(res, 1, "pairs.jsonl:2: cannot read it as JSON")


def arrow(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with pa.ipc.new_stream(folder / "data.arrow", pa.schema([("y", pa.int64())])) as w:
        w.write_table(pa.table({"y": [1]}))


@pytest.mark.parametrize("name", ["dataset_dict.json", "state.json"])
@pytest.mark.parametrize(
    "text", [DEEP, '{"splits": ' + HUGE + "}", "[1, 2]"], ids=["deep", "huge", "list"]
)
def test_hf_folder_json_deep_huge_or_not_an_object_is_one_line(
    name: str, text: str, tmp_path: Path
) -> None:
    arrow(tmp_path / "src")
    (tmp_path / "src" / name).write_text(text)
    res = prep("import", "hf", str(tmp_path / "src"), str(tmp_path / "o"))
    one_line(res, 1, name)


@pytest.mark.parametrize(
    "state",
    [
        {"_data_files": [{"name": "data.arrow"}]},
        {"_data_files": "data.arrow"},
        {"_data_files": [{"filename": 3}]},
        {"_data_files": [{"filename": "data.arrow"}], "_split": ["train"]},
    ],
)
def test_hf_state_json_of_another_shape_is_one_line(state: Any, tmp_path: Path) -> None:
    arrow(tmp_path / "src")
    (tmp_path / "src" / "state.json").write_text(json.dumps(state))
    res = prep("import", "hf", str(tmp_path / "src"), str(tmp_path / "o"))
    one_line(res, 1, "state.json", "_data_files")


@pytest.mark.parametrize(
    ("features", "said"),
    [
        ({"y": {"_type": "Value"}}, "column y: feature Value without 'dtype'"),
        ({"y": {"_type": "ClassLabel"}}, "column y: feature ClassLabel without 'names'"),
        ({"y": {"_type": "ClassLabel", "names": "ab"}}, "column y: feature ClassLabel without"),
        ({"y": {"_type": "Sequence"}}, "column y: a malformed feature"),
        ({"y": {"_type": "Array2D", "dtype": "int64"}}, "column y: a malformed feature"),
        ([{"name": "y", "dtype": "int64"}], "features are a JSON list"),
    ],
)
def test_hf_malformed_features_exit_2_naming_the_column(
    features: Any, said: str, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.table({"y": [0, 1]}), src / "train.parquet")
    (src / "dataset_info.json").write_text(json.dumps({"features": features}))
    res = prep("import", "hf", str(src), str(tmp_path / "o"))
    one_line(res, 2, said)


def coco(root: Path, names: list[str]) -> Path:
    PILImage.new("RGB", (8, 8)).save(root / "a.png")
    images = [{"id": i, "file_name": n, "width": 8, "height": 8} for i, n in enumerate(names)]
    data = {"images": images, "annotations": [], "categories": [{"id": 1, "name": "x"}]}
    (root / "coco.json").write_text(json.dumps(data))
    return root / "coco.json"


def test_one_or_two_rejects_are_named_on_the_line(tmp_path: Path) -> None:
    """Over --max-rejects, the error names the one missing image; under it, the summary line
    names the two; three or more are counted by reason (rejects.jsonl names them)."""
    src = coco(tmp_path, ["a.png", "gone.png"])
    res = prep("import", "coco", str(src), str(tmp_path), str(tmp_path / "o"))
    one_line(
        res, 1, "1 of 2 inputs rejected (50.0% > --max-rejects 0.01: 1 missing: gone.png, image "
    )
    src = coco(tmp_path, ["a.png", "gone.png", "lost.png"])
    res = prep(
        "import", "coco", str(src), str(tmp_path), str(tmp_path / "o2"), "--max-rejects", "1"
    )
    assert res.exit_code == 0, res.output
    assert "2 rejected (gone.png: missing, image " in res.output
    assert "; lost.png: missing, image " in res.output and "HINT" not in res.output
    src = coco(tmp_path, ["a.png", "gone.png", "lost.png", "void.png"])
    res = prep("import", "coco", str(src), str(tmp_path), str(tmp_path / "o3"))
    one_line(res, 1, "3 of 4 inputs rejected (75.0% > --max-rejects 0.01: 3 missing)")


def test_odd_values_in_coco_and_hf_json_are_one_line_or_a_reject(tmp_path: Path) -> None:
    """What a fuzzer of the parsers found: a category's keypoints that are a number, an
    image_id that is a list (no dict key), a list length of Infinity."""
    src = coco(tmp_path, ["a.png"])
    data = json.loads(src.read_text())
    data["categories"][0]["keypoints"] = 3
    src.write_text(json.dumps(data))
    res = prep("import", "coco", str(src), str(tmp_path), str(tmp_path / "o"), "--keypoints")
    one_line(res, 1, "coco.json: category 1's keypoints are not a list")
    data["categories"][0].pop("keypoints")
    data["annotations"] = [{"id": 1, "image_id": [0], "category_id": 1, "bbox": [0, 0, 1, 1]}]
    src.write_text(json.dumps(data))
    res = prep("import", "coco", str(src), str(tmp_path), str(tmp_path / "o"))
    assert res.exit_code == 0, res.output  # the annotation of no image is no image's
    (tmp_path / "hf").mkdir()
    pq.write_table(pa.table({"y": [[0.5]]}), tmp_path / "hf" / "train.parquet")
    seq = {"_type": "Sequence", "feature": {"_type": "Value", "dtype": "float32"}}
    features = {"features": {"y": {**seq, "length": float("inf")}}}
    (tmp_path / "hf" / "dataset_info.json").write_text(json.dumps(features))
    res = prep("import", "hf", str(tmp_path / "hf"), str(tmp_path / "o2"))
    one_line(res, 2, "column y: a malformed feature")
