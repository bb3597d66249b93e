"""Every ```python block of README.md runs as written after `make dataset` (issue 24).

The demo datasets are made first, into the repository's data/ folder, by the prep commands of
the Makefile's `dataset` recipe (read from the Makefile, so that the two cannot drift apart);
a folder that already holds its dataset (after `make dataset`) is kept. A block may start with
comment lines the test reads:

- `# needs: cuda` (or torchrun, s3: anything but cuda is never here): skipped, with the reason;
- `# after: prep ...`: a command the block needs first, run when its OUT does not exist yet.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent  # the venv's, where prep is installed
BUILDS = ("demo", "pack", "tokenize", "volumes", "table", "samples", "import")  # not verify

pytestmark = pytest.mark.slow


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number of the opening fence, code) of each ```python block."""
    blocks, start, code = [], None, []
    for n, line in enumerate(text.splitlines(), 1):
        if start is None and line.strip() == "```python":
            start, code = n, []
        elif start is not None and line.strip() == "```":
            blocks.append((start, "\n".join(code) + "\n"))
            start = None
        elif start is not None:
            code.append(line)
    return blocks


def makefile_commands(makefile: Path) -> list[tuple[list[str], list[str]]]:
    """The prep commands that make data, in the order `make dataset` runs them, each with its
    rule's file prerequisites: the recipes of data/demo-raw/.done, data/demo-ct/.done and
    dataset, continuation lines joined."""
    recipes: dict[str, tuple[list[str], list[str]]] = {}
    target = None
    for line in makefile.read_text().replace("\\\n", " ").splitlines():
        head = re.match(r"^([\w./-]+):(.*)$", line)
        if head:
            target = head.group(1)
            # source files only: another rule's .done stamp is made by that rule, not here
            words = head.group(2).split()
            files = [p for p in words if "$" not in p and "/" in p and not p.endswith(".done")]
            recipes[target] = ([], files)
        elif line.startswith("\t") and target is not None:
            recipes[target][0].append(line.strip())
    out = []
    for name in ("data/demo-raw/.done", "data/demo-ct/.done", "dataset"):
        lines, files = recipes.get(name, ([], []))
        for line in lines:
            args = shlex.split(line.replace("$(BIN)/", ""))
            if args and args[0] == "prep" and args[1] in BUILDS:
                out.append((args, files))
    return out


def _out(args: list[str]) -> Path:
    """Where a prep command writes: the config's out for `--config`, else its last path."""
    if "--config" in args:
        import tomllib

        cfg = tomllib.loads((ROOT / args[args.index("--config") + 1]).read_text())
        return ROOT / cfg[args[1]]["out"]
    paths = [a for a in args[2:] if not a.startswith("-") and "/" in a]
    last = args[1] in ("demo", "import")  # import coco takes two sources before OUT
    return ROOT / paths[-1] if last else ROOT / paths[1]


def _done(out: Path, prerequisites: list[str]) -> bool:
    """A dataset, or demo data newer than its rule's files (as make decides)."""
    if (out / "manifest.json").is_file():
        return True
    done = out / ".done"
    newest = max((os.stat(ROOT / p).st_mtime for p in prerequisites), default=0.0)
    return done.is_file() and done.stat().st_mtime >= newest


def _prep(args: list[str], prerequisites: list[str] = []) -> None:  # noqa: B006 - read only
    out = _out(args)
    if _done(out, prerequisites):
        return
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(BIN / "prep"), *args[1:]]
    if args[1] != "demo" and "-q" not in cmd:
        cmd.append("-q")
    if "--overwrite" in cmd:  # a fresh folder: nothing to overwrite
        cmd.remove("--overwrite")
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert p.returncode == 0, f"{shlex.join(args)}: {p.stderr}"
    if args[1] == "demo":
        (out / ".done").touch()  # as the Makefile marks it


@pytest.fixture(scope="module")
def demo_data() -> None:
    """The datasets `make dataset` makes, under data/ (kept when they are there already)."""
    for args, prerequisites in makefile_commands(ROOT / "Makefile"):
        _prep(args, prerequisites)


BLOCKS = python_blocks(README.read_text())


def test_the_readme_has_python_blocks_and_the_makefile_makes_data() -> None:
    assert len(BLOCKS) >= 5
    names = [a[1] for a, _ in makefile_commands(ROOT / "Makefile")]
    assert "demo" in names and "pack" in names and "tokenize" in names


@pytest.mark.parametrize("line, code", BLOCKS, ids=[f"README.md:{n}" for n, _ in BLOCKS])
def test_readme_python_block_runs(line: int, code: str, demo_data: None) -> None:
    heads = re.findall(r"^# (needs|after): (.+)$", code, flags=re.M)
    for key, value in heads:
        if key == "needs":
            needs = {v.strip() for v in value.split(",")}
            if needs != {"cuda"}:
                pytest.skip(f"README.md:{line} needs {value} (not on a test machine)")
            import torch

            if not torch.cuda.is_available():
                pytest.skip(f"README.md:{line} needs CUDA")
    for key, value in heads:
        if key == "after":
            _prep(shlex.split(value))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, f"README.md:{line} failed:\n{code}\n{p.stderr[-3000:]}"
