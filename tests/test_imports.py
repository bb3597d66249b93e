"""The dependency rules of DESIGN.md: the CLI starts without torch; loaders stay light."""

from __future__ import annotations

import subprocess
import sys


def modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {m.split(".")[0] for m in out.split()}


def test_prep_cli_does_not_import_torch() -> None:
    mods = modules_after("from prep.cli import app")
    assert "torch" not in mods and "cv2" not in mods and "tokenizers" not in mods


def test_loaders_import_no_prep_side_libraries() -> None:
    mods = modules_after("import loaders\nfor name in loaders.__all__: getattr(loaders, name)")
    assert "torch" in mods
    assert not mods & {"prep", "cv2", "PIL", "joblib", "typer", "tokenizers", "h5py"}


def test_prep_help_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from prep.cli import app; app()", "--help"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and "pack" in out.stdout
