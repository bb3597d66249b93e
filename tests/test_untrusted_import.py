"""Importing a source someone else made reads no file outside the source's own tree: a COCO
file_name, a caption list's image path, a Hugging Face Image's path that is absolute, climbs
out with `..` or is a link out of the tree is an `outside` reject naming the input; a state.json
file or dataset_dict.json split outside SRC is one error line. `--allow-outside` reads them, and
the common layouts (annotations beside the images folder) pass without it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from loaders import SampleDataset
from prep.cli.main import app

SECRET = np.full((12, 12, 3), 201, np.uint8)  # the outside file's pixels: none may be packed


def prep(*args: str) -> Any:
    return CliRunner().invoke(app, [*args, "-q", "--jobs", "1", "--sizes", "12"])


def png(path: Path, value: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.fromarray(np.full((12, 12, 3), value, np.uint8)).save(path)
    return path


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Any]:
    """src/ holds one image of its own and a link out; secret/x.png lies beside it."""
    secret = tmp_path / "secret" / "x.png"
    secret.parent.mkdir()
    PILImage.fromarray(SECRET).save(secret)
    src = tmp_path / "src"
    png(src / "images" / "own.png", 7)
    (src / "images" / "link.png").symlink_to(secret)
    names = ["own.png", "../../secret/x.png", str(secret), "link.png"]
    return {"src": src, "secret": secret, "names": names}


def rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["path"]: r["reason"] for r in map(json.loads, lines)}


def pixels(out: Path) -> list[np.ndarray]:
    ds = SampleDataset(out, fields=("image",))
    return [ds[i]["image"].permute(1, 2, 0).numpy() for i in range(len(ds))]


def coco(path: Path, names: list[str]) -> Path:
    images = [{"id": i, "file_name": n, "width": 12, "height": 12} for i, n in enumerate(names)]
    cats = [{"id": 1, "name": "thing"}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"images": images, "annotations": [], "categories": cats}))
    return path


def test_coco_file_names_outside_images_are_rejects(layout: dict[str, Any], tmp_path: Path) -> None:
    src, names = layout["src"], layout["names"]
    ann = coco(src / "annotations" / "instances.json", names)  # beside images/, not above
    out = tmp_path / "out"
    res = prep("import", "coco", str(ann), str(src / "images"), str(out), "--max-rejects", "1")
    assert res.exit_code == 0, res.output
    assert rejects(out) == {n: "outside" for n in names[1:]}
    assert [int(p.max()) for p in pixels(out)] == [7]  # own.png only
    line = (out / "rejects.jsonl").read_text()
    assert "absolute path" in line and "leads out" in line and "is a link to" in line
    res = prep("import", "coco", str(ann), str(src / "images"), str(tmp_path / "all"),
               "--allow-outside")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert sum(np.array_equal(p, SECRET) for p in pixels(tmp_path / "all")) == 3
    (tmp_path / "linked").symlink_to(src / "images")  # IMAGES itself a link: its tree
    res = prep("import", "coco", str(ann), str(tmp_path / "linked"), str(tmp_path / "via"),
               "--max-rejects", "1")  # fmt: skip
    assert res.exit_code == 0 and rejects(tmp_path / "via") == rejects(out), res.output


def test_pairs_image_paths_outside_the_lists_folder_are_rejects(
    layout: dict[str, Any], tmp_path: Path
) -> None:
    src, names = layout["src"], layout["names"]
    rows = [
        {"image": f"images/{n}" if i != 2 else n, "caption": f"c{i}"} for i, n in enumerate(names)
    ]
    (src / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = prep(
        "import", "pairs", str(src / "pairs.jsonl"), str(tmp_path / "out"), "--max-rejects", "1"
    )
    assert res.exit_code == 0, res.output
    assert rejects(tmp_path / "out") == {f"pairs.jsonl:{n}": "outside" for n in (2, 3, 4)}
    assert [int(p.max()) for p in pixels(tmp_path / "out")] == [7]
    # An HF Image struct in Parquet without bytes: its path is checked the same way.
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    images = pa.array([{"bytes": None, "path": f"images/{n}" if i != 2 else n}
                       for i, n in enumerate(names)], struct)  # fmt: skip
    pq.write_table(pa.table({"image": images, "caption": ["a"] * 4}), src / "pairs.parquet")
    res = prep(
        "import", "pairs", str(src / "pairs.parquet"), str(tmp_path / "pq"), "--max-rejects", "1"
    )
    assert res.exit_code == 0, res.output
    assert sorted(rejects(tmp_path / "pq").values()) == ["outside"] * 3
    assert [int(p.max()) for p in pixels(tmp_path / "pq")] == [7]


def test_hf_image_paths_outside_src_are_rejects(layout: dict[str, Any], tmp_path: Path) -> None:
    src, names = layout["src"], layout["names"]
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    paths = [f"images/{n}" if i != 2 else n for i, n in enumerate(names)]
    image = pa.array([{"bytes": None, "path": p} for p in paths], struct)
    pq.write_table(pa.table({"image": image, "y": [0, 1, 2, 3]}), src / "train.parquet")
    res = prep("import", "hf", str(src), str(tmp_path / "out"), "--max-rejects", "1")
    assert res.exit_code == 0, res.output
    assert rejects(tmp_path / "out") == {f"train.parquet:{i}": "outside" for i in (1, 2, 3)}
    assert [int(p.max()) for p in pixels(tmp_path / "out")] == [7]
    res = prep("import", "hf", str(src), str(tmp_path / "all"), "--allow-outside")
    assert res.exit_code == 0, res.output
    assert sum(np.array_equal(p, SECRET) for p in pixels(tmp_path / "all")) == 3


def arrow_folder(folder: Path, files: list[str], value: int) -> None:
    """A save_to_disk folder (state.json naming `files`) whose arrow file holds `value`."""
    folder.mkdir(parents=True, exist_ok=True)
    with pa.ipc.new_stream(
        folder / "data-00000-of-00001.arrow", pa.schema([("y", pa.int64())])
    ) as w:
        w.write_table(pa.table({"y": [value]}))
    state = {"_data_files": [{"filename": f} for f in files], "_split": None}
    (folder / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize("how", ["dotdot", "absolute", "link"])
def test_hf_state_and_dataset_dict_naming_outside_are_one_line(how: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    arrow_folder(elsewhere, ["data-00000-of-00001.arrow"], 99)
    name = {"dotdot": "../elsewhere", "absolute": str(elsewhere), "link": "train"}[how]
    src = tmp_path / "src"
    src.mkdir()
    if how == "link":
        (src / "train").symlink_to(elsewhere)
    (src / "dataset_dict.json").write_text(json.dumps({"splits": [name]}))
    res = prep("import", "hf", str(src), str(tmp_path / "out"))
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert res.output.count("\n") == 1 and "dataset_dict.json" in res.output, res.output
    assert "--allow-outside" in res.output and not (tmp_path / "out").exists()
    # state.json naming a data file outside its folder's tree: the same line.
    own = tmp_path / "own"
    arrow_folder(own, [{"dotdot": "../elsewhere/data-00000-of-00001.arrow",
                        "absolute": str(elsewhere / "data-00000-of-00001.arrow"),
                        "link": "linked.arrow"}[how]], 1)  # fmt: skip
    (own / "linked.arrow").symlink_to(elsewhere / "data-00000-of-00001.arrow")
    res = prep("import", "hf", str(own), str(tmp_path / "out2"))
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert "state.json" in res.output and "--allow-outside" in res.output, res.output
    res = prep("import", "hf", str(own), str(tmp_path / "out3"), "--allow-outside")
    assert res.exit_code == 0, res.output
    assert SampleDataset(tmp_path / "out3", fields=("y",))[0]["y"] == 99
