"""Config files and list sources: wrong values are one clear error, --limit counts rejects."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from prep import PrepError
from prep.kinds.images.config import PackConfig
from prep.kinds.text.config import TokenizeConfig
from prep.run.config import load_config
from prep.sources.images import list_images


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


def _list(tmp_path: Path, labels: Sequence[object], kind: str = "csv") -> Path:
    """A list of existing images (x0.png, x1.png...) with these labels."""
    for i in range(len(labels)):
        (tmp_path / f"x{i}.png").write_bytes(b"listing never decodes")
    if kind == "csv":
        lst = tmp_path / "l.csv"
        lst.write_text("path,label\n" + "".join(f"x{i}.png,{x}\n" for i, x in enumerate(labels)))
    else:
        lst = tmp_path / "l.jsonl"
        rows = [{"path": f"x{i}.png", "label": x} for i, x in enumerate(labels)]
        lst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return lst


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_integer_labels_and_their_bounds(tmp_path: Path, kind: str) -> None:
    """Integer labels are ASCII decimal integers 0..2**31 - 1; a negative one, or one too large
    for a class id, is a bad_label reject, whatever its size."""
    big = "100000000000000000000000"  # 10**23
    labels = ["7", "0", "-1", big, "2147483647", "2147483648", "1" * 5000, "007"]
    listing = list_images(_list(tmp_path, labels, kind))
    assert listing.classes is None
    assert [(it.rel, it.label) for it in listing.items] == [
        ("x0.png", 7),
        ("x1.png", 0),
        ("x4.png", 2**31 - 1),
        ("x7.png", 7),
    ]
    reasons = {r["path"]: (r["reason"], r["message"]) for r in listing.rejects}
    assert set(reasons) == {"x2.png", "x3.png", "x5.png", "x6.png"}
    assert {reason for reason, _ in reasons.values()} == {"bad_label"}
    assert "label -1 is negative" in reasons["x2.png"][1]
    assert f"label {big} is over 2147483647" in reasons["x3.png"][1]
    assert "over 2147483647" in reasons["x6.png"][1] and len(reasons["x6.png"][1]) < 200


def test_json_integer_labels_too_large(tmp_path: Path) -> None:
    listing = list_images(_list(tmp_path, [3, 10**23, -2], "jsonl"))
    assert [it.label for it in listing.items] == [3]
    assert [r["reason"] for r in listing.rejects] == ["bad_label", "bad_label"]


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_unicode_digits_are_class_names(tmp_path: Path, kind: str) -> None:
    """ "²" and "٣" pass str.isdigit, yet only ASCII digits make an integer label."""
    listing = list_images(_list(tmp_path, ["²", "٣", "cat", "²"], kind))
    assert listing.classes == ["cat", "²", "٣"]
    assert [it.label for it in listing.items] == [1, 2, 0, 1]


@pytest.mark.parametrize(
    ("labels", "line", "value"),
    [
        (["1", "2", "²", "3"], 4, "²"),
        (["1", "--1", "2"], 3, "--1"),
        (["5", "1.5", "2"], 3, "1.5"),
        (["cat", "dog", "3", "cat"], 4, "3"),  # the odd one out is named, whichever kind
    ],
)
def test_mixed_integer_and_name_labels_fail_naming_the_row(
    tmp_path: Path, labels: list[str], line: int, value: str
) -> None:
    with pytest.raises(PrepError) as info:
        list_images(_list(tmp_path, labels))
    message = str(info.value)
    assert len(message.splitlines()) == 1 and "HINT:" in message
    assert f"l.csv: line {line} has the label {value!r}" in message


def test_json_labels_that_are_neither_integer_nor_string(tmp_path: Path) -> None:
    for bad in (1.5, True, [1], {"a": 1}):
        with pytest.raises(PrepError, match=r"l\.jsonl: line 2 has the label .* HINT:"):
            list_images(_list(tmp_path, [1, bad, 2], "jsonl"))


def test_unlabelled_row_among_labelled_ones_is_named(tmp_path: Path) -> None:
    with pytest.raises(PrepError, match=r"l\.csv: line 3 has no label, .* HINT: label every row"):
        list_images(_list(tmp_path, ["1", "", "2"]))


def test_paths_no_file_can_have_are_rejects(tmp_path: Path) -> None:
    """A NUL byte, or a lone surrogate that is not an undecodable byte (surrogateescape maps
    U+DC80..U+DCFF to bytes 0x80..0xFF), names no file: a bad_path reject, no traceback."""
    (tmp_path / "ok.png").write_bytes(b"x")
    (tmp_path / os.fsdecode(b"raw-\xff.png")).write_bytes(b"x")
    lst = tmp_path / "l.jsonl"
    paths = ["ok.png", "nul\x00.png", "lone-\ud800.png", "raw-\udcff.png"]
    lst.write_text("".join(json.dumps({"path": p}) + "\n" for p in paths))
    listing = list_images(lst)
    assert [it.rel for it in listing.items] == ["ok.png", "raw-\udcff.png"]
    reasons = {r["path"]: (r["reason"], r["message"]) for r in listing.rejects}
    assert {p: reason for p, (reason, _) in reasons.items()} == {
        "nul\x00.png": "bad_path",
        "lone-\ud800.png": "bad_path",
    }
    assert "NUL" in reasons["nul\x00.png"][1] and "U+D800" in reasons["lone-\ud800.png"][1]


def test_a_path_that_is_not_a_string_names_the_line(tmp_path: Path) -> None:
    lst = tmp_path / "l.jsonl"
    lst.write_text(json.dumps({"path": "a.png"}) + "\n\n" + json.dumps({"path": ["a.png"]}) + "\n")
    with pytest.raises(PrepError, match=r"l\.jsonl: line 3 has a 'path' that is not a string"):
        list_images(lst)
