"""Manifest checks added after review: names of arrays, kinds, token document offsets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from manifests import edit_manifest

from loaders.fields.checks import load_manifest
from loaders.format import FormatError, read_manifest
from loaders.format.schema import indented
from prep.kinds.text.config import TokenizeConfig
from prep.kinds.text.tokenize import tokenize


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["arrays"]["image_64"].update(size=96), "is not named 'image_64'"),
        (lambda m: m["fields"]["label"].update(kind="sound"), "field 'label' has no kind of"),
        (lambda m: m.update(storage="zarr"), "storage 'zarr'"),
    ],
)
def test_array_names_kind_and_storage_are_checked(packed: Path, copy_dataset, change, message):
    root = copy_dataset(packed)
    edit_manifest(root, change)
    with pytest.raises(FormatError, match=message):
        load_manifest(root)


def test_token_offsets_are_checked(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.txt").write_text(f"document number {i} " * (i + 1))
    out = tmp_path / "tok"
    tokenize(
        TokenizeConfig(src=str(src), out=str(out), jobs=1, val_fraction=0), show_progress=False
    )
    load_manifest(out)
    path = next(out.glob("tokens-offsets-*.npy"))
    off = np.load(path)
    off[1], off[2] = off[2], off[1]  # same size on disk, out of order
    with open(path, "r+b") as f:
        f.seek(128)  # prep's fixed .npy header
        f.write(off.tobytes())
    with pytest.raises(FormatError, match="the offsets of tokens are not 4 from 0 to its end"):
        load_manifest(out)


def test_manifest_text_is_json_dumps_with_flat_lists_on_one_line(packed: Path) -> None:
    """manifest.json is json.dumps(indent=1, sort_keys=True) of the manifest but for the
    whitespace (keys in its order, numbers named as it names them), with a list of no list or
    object on one line."""

    def bare(text: str) -> str:
        return "".join(text.split())

    d = json.loads(read_manifest(packed).to_json())
    odd = {"b": {10: [1, 2.5], 9: None, True: "x"}, "a": [[], {}, [{"c": [1]}]], "é": -0.0}
    for value in (d, odd):
        text = indented(value)
        assert bare(text) == bare(json.dumps(value, indent=1, sort_keys=True))
        for line in text.splitlines():  # no item of a flat list on a line of its own
            assert line.strip().rstrip(",") not in ("1", "2.5", "256", "3", "null"), line
    assert '"b": [1, 2.5]' in indented({"b": [1, 2.5]})
