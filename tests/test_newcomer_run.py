"""What a newcomer meets around every writing command (issue 24): defaults in --help, a failed
run's folder that holds nothing worth keeping, text files of any extension."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from prep.cli.main import app


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _flat(text: str) -> str:
    """Help text without Rich's boxes and line breaks."""
    return re.sub(r"[\s│╭╮╰╯─]+", " ", text)


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("pack", ["(default: 256)", "(default: fill)", "(default: raw)", "(default: rgb)"]),
        ("grayscale", ["(default: gray)"]),
        ("tokenize", ["(default: bytes)", "(default: 8192)", "(default: 0.01)"]),
        ("volumes", ["(default: 0.01)"]),
        ("table", ["(default: 524288)", "(default: 0.0)", "(default: off)"]),
    ],
)
def test_help_shows_the_defaults(command: str, shown: list[str]) -> None:
    r = _run(command, "--help")
    assert r.exit_code == 0
    text = _flat(r.output)
    for s in shown:
        assert s in text, (command, s)
    assert "(default: auto)" in text and "[default: (" not in text


def _csv(path: Path, bad_rows: int = 0) -> Path:
    rows = [f"{i},{i % 3}" for i in range(40)] + ["1,2,3"] * bad_rows
    path.write_text("a,label\n" + "\n".join(rows) + "\n")
    return path


def test_a_failed_run_that_finished_no_shard_starts_again(tmp_path: Path) -> None:
    src, out = _csv(tmp_path / "t.csv"), tmp_path / "o"
    typo = _run("table", str(src), str(out), "--target", "Label", "-q")
    assert typo.exit_code == 1 and (tmp_path / "o.partial").is_dir()
    fixed = _run("table", str(src), str(out), "--target", "label", "-q")
    assert fixed.exit_code == 0, fixed.output
    assert "packed nothing: starting again" in fixed.output
    assert (out / "manifest.json").is_file() and not (tmp_path / "o.partial").exists()


def test_a_run_that_rejected_every_input_starts_again(tmp_path: Path) -> None:
    from PIL import Image

    src, out = tmp_path / "imgs" / "a", tmp_path / "o"
    src.mkdir(parents=True)
    for i in range(3):
        (src / f"{i}.jpg").write_bytes(b"not a jpeg")
    failed = _run("pack", str(src.parent), str(out), "-s", "16", "-q", "-j", "1")
    assert failed.exit_code == 1 and "3 of 3 inputs rejected" in failed.output
    for i in range(3):
        Image.new("RGB", (20, 20), (i, 0, 0)).save(src / f"{i}.jpg")
    fixed = _run("pack", str(src.parent), str(out), "-s", "16", "-q", "-j", "1")
    assert fixed.exit_code == 0 and "packed nothing: starting again" in fixed.output


def test_a_failed_run_with_finished_shards_asks(tmp_path: Path) -> None:
    src, out = _csv(tmp_path / "t.csv", bad_rows=1), tmp_path / "o"
    failed = _run("table", str(src), str(out), "--max-rejects", "0", "-q")
    assert failed.exit_code == 1 and "rejected" in failed.output
    again = _run("table", str(src), str(out), "-q")
    assert again.exit_code == 1
    assert "holds an unfinished run" in again.output and "--resume" in again.output
    assert "--overwrite" in again.output


def test_tokenize_glob_reads_text_of_any_extension(tmp_path: Path) -> None:
    from loaders.format import read_manifest

    src = tmp_path / "code"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("def f():\n    return 'é'\n")
    (src / "b.py").write_text("x = 1\n")
    (src / "notes.md").write_text("# title\n")
    plain = _run("tokenize", str(src), str(tmp_path / "none"), "-q", "-j", "1")
    assert plain.exit_code == 1 and "--glob '*.py,*.md'" in plain.output
    r = _run("tokenize", str(src), str(tmp_path / "o"), "--glob", "*.py", "-q", "-j", "1")
    assert r.exit_code == 0, r.output
    assert ": 2 documents" in r.output
    m = read_manifest(tmp_path / "o")
    assert m.config["glob"] == "*.py"
    both = _run("tokenize", str(src), str(tmp_path / "o2"), "--glob", "*.py, *.md", "-q")
    assert both.exit_code == 0 and ": 3 documents" in both.output
    sub = _run("tokenize", str(src), str(tmp_path / "o3"), "--glob", "pkg/*.py", "-q")
    assert sub.exit_code == 0 and ": 1 documents" in sub.output


def test_tune_on_a_keep_dataset_recommends_its_crop(tmp_path: Path) -> None:
    from prep.inspect.tune import TuneResult, TuneRow

    fields = ("image", "label")
    result = TuneResult(tmp_path / "d", 128, 32, 2, fields, 100, 1 << 20, keep=True)
    result.rows.append(TuneRow(0, 1000.0, 100.0, 3, 3 << 20, threads=2))
    advice = result.advice()
    assert "crop=CenterCrop(128, ratio=1.0)" in advice and "make_loader(ds, " in advice
    result.keep = False
    assert "crop=" not in result.advice()


def test_tune_on_a_table_fails_before_loading_torch(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "o"
    assert _run("table", str(_csv(tmp_path / "t.csv")), str(out), "-q").exit_code == 0
    code = (
        "import sys\nfrom prep import PrepError\nfrom prep.inspect.tune import tune\n"
        f"try:\n    tune({str(out)!r})\nexcept PrepError as e:\n    print(e)\n"
        "print('torch' in sys.modules)\n"
    )
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    refused = f"{out} has no image field 'image': prep tune times ImageShardDataset."
    assert said.stdout.splitlines()[0].startswith(refused) and said.stdout.splitlines()[1:] == [
        "False"
    ]
