"""Config files and list sources: wrong values are one clear error, --limit counts rejects."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prep import PrepError
from prep.config import PackConfig, TokenizeConfig, load_config
from prep.kinds.images.sources import list_images


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sizes = 256", r"sizes = 256 is not list\[int\]"),
        ("gray = 'yes'", "gray = 'yes' is not bool"),
        ("limit = 2.5", "limit = 2.5 is not int"),
        ("max_rejects = '1%'", "max_rejects = '1%' is not float"),
    ],
)
def test_config_types_are_checked(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[pack]\n{text}\n")
    with pytest.raises(PrepError, match=message):
        load_config(PackConfig, "pack", cfg, {})


def test_config_values_and_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[pack]\nsizes = [64, 32]\nmax_rejects = 0\n[tokenize]\nval_fraction = 0\n")
    pack = load_config(PackConfig, "pack", cfg, {"src": "a", "out": "b", "limit": None})
    assert pack.sizes == [64, 32] and pack.max_rejects == 0 and pack.limit is None
    assert load_config(TokenizeConfig, "tokenize", cfg, {}).val_fraction == 0
    with pytest.raises(PrepError, match="--limit 0 must be at least 1"):
        PackConfig(src="a", out="b", limit=0).validate()


def test_limit_counts_rejected_names_too(raw_demo: Path, tmp_path: Path) -> None:
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    for name in ("b.jpg", "d.jpg", "e.jpg"):
        os.link(next((raw_demo / "images").rglob("*.jpg")), src / name)
    (src / "a.jpg").symlink_to(tmp_path / "nowhere.jpg")  # first by name, and broken
    listing = list_images(tmp_path / "src", limit=2)
    assert [it.rel for it in listing.items] == ["a/b.jpg"]
    assert [r["reason"] for r in listing.rejects] == ["broken_link"]


def test_list_rows_without_path_name_the_line(tmp_path: Path) -> None:
    lst = tmp_path / "l.jsonl"
    lst.write_text(json.dumps({"path": "x.jpg"}) + "\n" + json.dumps({"label": 1}) + "\n")
    with pytest.raises(PrepError, match="line 2 has no 'path'"):
        list_images(lst)
    lst.write_text("[1, 2]\n")
    with pytest.raises(PrepError, match="line 1 has no 'path'"):
        list_images(lst)
