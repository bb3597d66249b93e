"""Opening a dataset someone else made (issue 23): manifests a JSON parser accepts but prep does
not write are one FormatError line at open, and `prep verify` reads every value against the
manifest (token ids, table and target codes) in bounded memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from untrusted import copy, digest, edit_manifest, images, packed_table, rewrite, tokens, volumes

from loaders import DocumentDataset, ImageShardDataset, TableDataset
from loaders.fields import Column
from loaders.fields.checks import check_files, load_manifest
from loaders.format import MANIFEST, ArrayRef, FormatError, read_manifest

# ---------------------------------------------------------------- 6. manifests JSON accepts


def test_deeply_nested_manifest(tmp_path: Path) -> None:
    root = images(tmp_path / "ds")
    (root / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FormatError, match=r"manifest\.json"):
        read_manifest(root)


def test_deeply_nested_extra(tmp_path: Path) -> None:
    root = images(tmp_path / "ds")
    text = (
        (root / MANIFEST)
        .read_text()
        .replace('"extra": {}', '"extra": ' + "[" * 100_000 + "]" * 100_000)
    )
    (root / MANIFEST).write_text(text)
    with pytest.raises(FormatError, match=r"manifest\.json"):
        ImageShardDataset(root)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(extra=[1, 2]), "extra"),
        (lambda d: d.update(config="x"), "config"),
        (lambda d: d["fields"]["tokens"].update(eot_id=-1), "eot_id"),
        (lambda d: d["fields"]["tokens"].update(eot_id="5"), "eot_id"),
        (lambda d: d["fields"]["tokens"].update(eot_id=True), "eot_id"),
        (lambda d: d["fields"]["tokens"].update(eot_id=300), "eot_id"),
        (lambda d: d["fields"]["tokens"].pop("vocab_size"), "vocab_size"),
        (lambda d: d["fields"]["tokens"].update(vocab_size=2.5), "vocab_size"),
        (lambda d: d["fields"]["tokens"].update(vocab_size=0), "vocab_size"),
    ],
    ids=[
        "extra-list",
        "config-str",
        "eot-negative",
        "eot-str",
        "eot-bool",
        "eot-too-big",
        "no-vocab",
        "vocab-float",
        "vocab-0",
    ],
)
def test_token_manifest_fields(tmp_path: Path, change: Any, message: str) -> None:
    root = edit_manifest(tokens(tmp_path / "tok", [[1, 2, 3]], eot_id=3), change)
    with pytest.raises(FormatError, match=message):
        load_manifest(root)
    with pytest.raises(FormatError, match=message):
        DocumentDataset(root, split="train")


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packed_table(tmp_path_factory.mktemp("table"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(fields={}), "fields"),
        (lambda d: d.update(fields=[{"kind": "column"}]), "fields"),
        (lambda d: d["fields"].update(num_0=5), "num_0"),
        (lambda d: d["fields"].pop("cat_0"), "array cat_0 is not what fields declares"),
        (lambda d: d["fields"]["cat_0"].update(nowhere=1), "nowhere"),
        (lambda d: d["fields"]["cat_0"].update(vocab="abc"), "vocab"),
        (lambda d: d["fields"]["cat_0"].update(role="key"), "role"),
        (lambda d: d["fields"]["num_0"].pop("kind"), "kind"),
        (lambda d: d["fields"]["num_0"].update(mean="x"), "mean"),
        (lambda d: d["fields"]["num_0"].update(type=["int"]), "type"),
    ],
    ids=[
        "no-fields",
        "fields-list",
        "column-int",
        "array-unclaimed",
        "unknown-key",
        "vocab-str",
        "role-unknown",
        "no-kind",
        "mean-str",
        "type-list",
    ],
)
def test_table_manifest_fields(table: Path, tmp_path: Path, change: Any, message: str) -> None:
    root = edit_manifest(copy(table, tmp_path / "t"), change)
    with pytest.raises(FormatError, match=message):
        load_manifest(root)
    with pytest.raises(FormatError, match=message):
        TableDataset(root)


@pytest.mark.parametrize("sizes", [[float("inf")], [float("nan")], [1e300]])
def test_image_sizes_that_are_no_int(tmp_path: Path, sizes: list[float]) -> None:
    root = edit_manifest(
        images(tmp_path / "ds"), lambda d: d["fields"]["image"].update(sizes=sizes)
    )
    with pytest.raises(FormatError, match="field 'image' is not a image field"):
        load_manifest(root)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["extra"].pop("volumes"), r"extra\.volumes"),
        (lambda d: d["extra"]["volumes"].pop(), r"extra\.volumes"),
        (lambda d: d["extra"]["volumes"][0].update(pad="0"), r"extra\.volumes"),
        (
            lambda d: d["fields"].update(volume_target_0={"kind": "column", "role": "target"}),
            "array volume_target_0 of field volume_target_0 is not among the manifest's arrays",
        ),
    ],
    ids=["no-volumes", "too-few", "pad-str", "target-array"],
)
def test_volume_manifest_extra(tmp_path: Path, change: Any, message: str) -> None:
    root = edit_manifest(volumes(tmp_path / "vol", [(1, 1, 4)], [0, 4], 4), change)
    with pytest.raises(FormatError, match=message):
        load_manifest(root)


# ---------------------------------------------------------------- 7. values against the manifest


def test_token_ids_beyond_vocab(tmp_path: Path) -> None:
    root = tokens(tmp_path / "tok", [[1, 2, 299, 3], [4]], vocab_size=300)
    assert check_files(root, read_manifest(root), checksums=True) == []
    edit_manifest(root, lambda d: d["fields"]["tokens"].update(vocab_size=299))
    problems = check_files(root, read_manifest(root), checksums=True)
    assert (
        len(problems) == 1
        and "tokens-00000.npy: token id 299 is not below vocab_size 299" in (problems[0])
    )
    assert check_files(root, read_manifest(root)) == []  # opening reads no token


def test_prep_verify_checks_values(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from prep.cli.main import app

    root = tokens(tmp_path / "tok", [[1, 2, 299, 3]], vocab_size=300)
    assert CliRunner().invoke(app, ["verify", str(root)]).exit_code == 0
    edit_manifest(root, lambda d: d["fields"]["tokens"].update(vocab_size=200))
    result = CliRunner().invoke(app, ["verify", str(root)])
    assert result.exit_code == 1 and "token id 299 is not below vocab_size 200" in result.output


def test_table_codes_beyond_vocab(table: Path, tmp_path: Path) -> None:
    root = copy(table, tmp_path / "t")
    m = read_manifest(root)
    assert check_files(root, m, checksums=True) == []
    for name, top in (("cat_0", 4), ("target", 1)):  # 0, 1, then 3 cities; 2 classes
        rel = m.shards[0].arrays[name].file
        codes = np.load(root / rel)
        codes[-1] = top + 1
        rewrite(root, rel, codes)
        problems = check_files(root, read_manifest(root), checksums=True)
        assert any(f"{rel}: code {top + 1} is beyond" in p for p in problems), problems
        codes[-1] = top
        rewrite(root, rel, codes)
        assert check_files(root, read_manifest(root), checksums=True) == []


def test_volume_target_codes_beyond_classes(tmp_path: Path) -> None:
    root = volumes(tmp_path / "vol", [(1, 1, 4), (1, 1, 4)], [0, 4, 8], 8)
    m = read_manifest(root)
    rel = "volume_target_0-00000.npy"
    np.save(root / rel, np.array([2, 3], np.uint8))
    grade = Column(name="grade", role="target", dtype="uint8", vocab=tuple("abc"), first_code=0)
    m.arrays["volume_target_0"] = grade.arrays("volume_target_0")[0]
    m.fields["volume_target_0"] = grade.describe()
    m.shards[0].arrays["volume_target_0"] = ArrayRef(rel, 2)
    m.shards[0].files[rel] = digest(root / rel)
    (root / MANIFEST).write_text(m.to_json())
    assert check_files(root, read_manifest(root)) == []  # opening reads no target
    problems = check_files(root, read_manifest(root), values=True)
    assert len(problems) == 1 and "code 3 is beyond column grade's codes 0..2" in problems[0]


def test_value_checks_run_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunked pass: 8 MB of tokens read 1 MB at a time, the bad id in the last chunk."""
    n = 4_000_000
    root = tokens(tmp_path / "tok", [[1] * (n - 1) + [299]], vocab_size=300)
    from loaders.fields import checks

    monkeypatch.setattr(checks, "CHUNK_BYTES", 1 << 20)
    edit_manifest(root, lambda d: d["fields"]["tokens"].update(vocab_size=299))
    m = read_manifest(root)
    tracemalloc.start()
    try:
        problems = check_files(root, m, values=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(problems) == 1 and "299" in problems[0]
    assert peak < 4 << 20, peak


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("vocab", ["a", 1]),
        ("vocab", ["a", ["b"]]),
        ("vocab", "abc"),
        ("counts", [3, -1]),
        ("counts", [3, True]),
        ("counts", [3, 1.0]),
        ("counts", [[3]]),
    ],
)
def test_a_column_vocabulary_or_counts_of_other_items_is_refused(key: str, value: Any) -> None:
    """A manifest's column: its vocabulary only text, its counts only counts (not bools)."""
    good = {"kind": "column", "name": "city", "role": "cat", "dtype": "int64"}
    good |= {"vocab": ["a", "b"], "counts": [3, 0]}
    assert Column.from_description(good).vocab == ("a", "b")
    with pytest.raises(ValueError, match=key):
        Column.from_description(good | {key: value})
