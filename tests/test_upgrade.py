"""`prep upgrade`: each dataset of the older formats (tests/legacy) rewritten as version 4 in
place reads exactly as before, its files untouched; a second run changes nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from test_legacy_formats import CASES, PACKED, expected, observe  # noqa: F401  (a fixture)
from typer.testing import CliRunner

from prep.cli import app


def _digests(root: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.iterdir()
        if p.name != "manifest.json"
    }


@pytest.mark.parametrize("fixture", sorted(p.name for p in PACKED.iterdir()))
def test_an_upgraded_dataset_reads_the_same(
    fixture: str,
    tmp_path: Path,
    expected: dict,  # noqa: F811
) -> None:
    root = tmp_path / fixture
    shutil.copytree(PACKED / fixture, root)
    before = _digests(root)
    runner = CliRunner()
    done = runner.invoke(app, ["upgrade", str(root)])
    assert done.exit_code == 0 and "-> 4" in done.output, done.output
    assert json.loads((root / "manifest.json").read_text())["format_version"] == 4
    assert _digests(root) == before
    for case_id, case in CASES.items():
        if case.fixture == fixture:
            got, want = observe(tmp_path, case), expected[case_id]
            assert got == want, case_id
    again = runner.invoke(app, ["upgrade", str(root)])
    assert again.exit_code == 0 and "already" in again.output
    assert runner.invoke(app, ["verify", str(root)]).exit_code == 0


def test_a_folder_without_a_dataset_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["upgrade", str(tmp_path)])
    assert res.exit_code == 1 and "holds no prep dataset" in res.output
