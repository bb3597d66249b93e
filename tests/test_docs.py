"""Every ```python and ```bash block of README.md and docs/*.md runs as written after
`make dataset` (issues 24 and 42), and the site builds with `mkdocs build --strict`.

The demo datasets are made first, into the repository's data/ folder, by the prep commands of
the Makefile's `dataset` recipe (read from the Makefile, so that the two cannot drift apart);
a folder that already holds its dataset (after `make dataset`) is kept. The blocks then run in
a temporary copy of the repository (its files, `data/` copied, `.venv` linked), so that a block
that repacks `data/demo-packed` or writes `sheet.jpg` leaves the checkout as it was. A block
may start with comment lines the test reads:

- `# needs: cuda` (or torchrun, s3, make: anything but cuda is never here): skipped, with the
  reason;
- `# after: prep ...`: a command the block needs first, run when its OUT does not exist yet.

Python blocks run with the venv's python, bash blocks with `bash -e -o pipefail`, both with the
venv's bin first on PATH and the copy on PYTHONPATH. The tests that run blocks, examples or the
build are marked `docs` (about 5 minutes on 2 cores, the demo data made first): `make docs-test`
runs them, and CI; `make test` runs the quick ones.
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
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent  # the venv's, where prep is installed
BUILDS = ("demo", "pack", "tokenize", "volumes", "table", "samples", "import", "audio", "video")
LANGS = ("python", "bash")
NOT_COPIED = {".git", ".venv", "data", "site", "build"}  # at the top: data is copied apart

pytestmark = pytest.mark.slow


def code_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line number of the opening fence, language, code) of each ```python and ```bash block."""
    blocks, start, lang, code = [], None, "", []
    for n, line in enumerate(text.splitlines(), 1):
        fence = line.strip()
        if start is None and fence in (f"```{lang_}" for lang_ in LANGS):
            start, lang, code = n, fence[3:], []
        elif start is not None and fence == "```":
            blocks.append((start, lang, "\n".join(code) + "\n"))
            start = None
        elif start is not None:
            code.append(line)
    return blocks


def makefile_commands(makefile: Path) -> list[tuple[list[str], list[str]]]:
    """The prep commands that make data, in the order `make dataset` runs them, each with its
    rule's file prerequisites: the recipes of the data/*/.done rules and dataset, continuation
    lines joined."""
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
    stamps = [t for t in recipes if t.startswith("data/") and t.endswith("/.done")]
    for name in (*stamps, "dataset"):
        lines, files = recipes.get(name, ([], []))
        for line in lines:
            args = shlex.split(line.replace("$(BIN)/", ""))
            if args and args[0] == "prep" and args[1] in BUILDS:
                out.append((args, files))
    return out


def _out(args: list[str], base: Path) -> Path:
    """Where a prep command writes: the config's out for `--config`, else its last path."""
    if "--config" in args:
        import tomllib

        cfg = tomllib.loads((base / args[args.index("--config") + 1]).read_text())
        return base / cfg[args[1]]["out"]
    paths = [a for a in args[2:] if not a.startswith("-") and "/" in a]
    last = args[1] in ("demo", "import")  # import coco takes two sources before OUT
    return base / paths[-1] if last else base / paths[1]


def _done(out: Path, prerequisites: list[str]) -> bool:
    """A dataset, or demo data newer than its rule's files (as make decides)."""
    if (out / "manifest.json").is_file():
        return True
    done = out / ".done"
    newest = max((os.stat(ROOT / p).st_mtime for p in prerequisites), default=0.0)
    return done.is_file() and done.stat().st_mtime >= newest


def _env(base: Path) -> dict[str, str]:
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "PYTHONPATH": str(base)}


def _prep(args: list[str], base: Path = ROOT, prerequisites: list[str] = []) -> None:  # noqa: B006 - read only
    out = _out(args, base)
    if _done(out, prerequisites):
        return
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(BIN / "prep"), *args[1:]]
    if args[1] != "demo" and "-q" not in cmd:
        cmd.append("-q")
    if "--overwrite" in cmd:  # a fresh folder: nothing to overwrite
        cmd.remove("--overwrite")
    p = subprocess.run(cmd, cwd=base, env=_env(base), capture_output=True, text=True, check=False)
    assert p.returncode == 0, f"{shlex.join(args)}: {p.stderr}"
    if args[1] == "demo":
        (out / ".done").touch()  # as the Makefile marks it


@pytest.fixture(scope="module")
def demo_data() -> None:
    """The datasets `make dataset` makes, under data/ (kept when they are there already)."""
    for args, prerequisites in makefile_commands(ROOT / "Makefile"):
        _prep(args, ROOT, prerequisites)


def _copy(base: Path) -> Path:
    """A copy of the repository at `base`, with the demo data (about 100 MB)."""

    def skip(folder: str, names: list[str]) -> set[str]:
        top = NOT_COPIED if Path(folder) == ROOT else set()
        return {n for n in names if n in top or n == "__pycache__" or n.endswith("_cache")}

    shutil.copytree(ROOT, base, ignore=skip, symlinks=True)
    shutil.copytree(ROOT / "data", base / "data", symlinks=True)
    (base / ".venv").symlink_to(BIN.parent)  # `source .venv/bin/activate` as in a checkout
    return base


@pytest.fixture(scope="module")
def workspace(demo_data: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The copy the blocks run in, one after the other, as a reader would run them."""
    return _copy(tmp_path_factory.mktemp("docs") / "repo")


BLOCKS = [
    (page.relative_to(ROOT).as_posix(), line, lang, code)
    for page in PAGES
    for line, lang, code in code_blocks(page.read_text())
]


def test_the_pages_have_blocks_and_the_makefile_makes_data() -> None:
    langs = {lang for _, _, lang, _ in BLOCKS}
    assert langs == {"python", "bash"} and len(BLOCKS) >= 30
    names = [a[1] for a, _ in makefile_commands(ROOT / "Makefile")]
    assert "demo" in names and "pack" in names and "tokenize" in names


def test_the_readme_is_short_and_starts_with_the_two_set_up_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    first = code_blocks(text)[0][2]
    commands = [line.split("#")[0].strip() for line in first.splitlines()]
    assert [c for c in commands if c] == ["make dataset", "make test"]


@pytest.mark.parametrize(
    "page, line, lang, code", BLOCKS, ids=[f"{p}:{n}" for p, n, _, _ in BLOCKS]
)
@pytest.mark.docs
def test_block_runs(page: str, line: int, lang: str, code: str, workspace: Path) -> None:
    heads = re.findall(r"^# (needs|after): (.+)$", code, flags=re.M)
    for key, value in heads:
        if key == "needs":
            needs = {v.strip() for v in value.split(",")}
            if needs != {"cuda"}:
                pytest.skip(f"{page}:{line} needs {value} (not on a test machine)")
            import torch

            if not torch.cuda.is_available():
                pytest.skip(f"{page}:{line} needs CUDA")
    for key, value in heads:
        if key == "after":
            _prep(shlex.split(value), workspace)
    run = (
        [sys.executable, "-c", code]
        if lang == "python"
        else ["bash", "-e", "-o", "pipefail", "-c", code]
    )
    p = subprocess.run(
        run,
        cwd=workspace,
        env=_env(workspace),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, (
        f"{page}:{line} failed:\n{code}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    )


@pytest.mark.docs
def test_the_site_builds_strict(tmp_path: Path) -> None:
    """`make docs`: a broken link or anchor, or a page the hooks cannot make, fails it."""
    mkdocs = BIN / "mkdocs"
    if not mkdocs.exists():
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    p = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**_env(ROOT), "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert all(f'id="prep-{name}"' in cli for name in ("pack", "tokenize", "import-coco"))
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "ImageShardDataset" in api and "pack_samples" in api


def _public_names() -> list[tuple[str, str]]:
    """(package.name, where it is defined) of each public class and function of `loaders`,
    `loaders.transforms`, `prep` and `prep.fields`: the names the API page documents."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import api  # docs/hooks/api.py: the API page's own list
    finally:
        sys.path.pop(0)
    return [
        (f"{package}.{name}", f"{where}.{name}")
        for package in api.PACKAGES.values()
        for name, where in api.public_names(package)
    ]


def test_every_public_name_has_a_docstring_with_an_example() -> None:
    import importlib
    import inspect

    missing = []
    for public, where in _public_names():
        module, name = where.rsplit(".", 1)
        doc = inspect.getdoc(getattr(importlib.import_module(module), name)) or ""
        if ">>>" not in doc:
            missing.append(public)
    assert not missing, f"public names without a docstring example (>>>): {missing}"


DOCTESTS = """
import doctest, importlib, sys
failed = 0
for where in sys.argv[1:]:
    module, name = where.rsplit(".", 1)
    obj = getattr(importlib.import_module(module), name)
    for test in doctest.DocTestFinder(recurse=False).find(obj, where, globs={}):
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        failed += runner.failures
sys.exit(1 if failed else 0)
"""


@pytest.mark.docs
def test_docstring_examples_run(demo_data: None, tmp_path: Path) -> None:
    """Each example of the public names runs, in a fresh copy of the repository (the demo data
    as `make dataset` made it, whatever the blocks did to theirs)."""
    wheres = sorted({where for _, where in _public_names()})
    base = _copy(tmp_path / "repo")
    p = subprocess.run(
        [sys.executable, "-c", DOCTESTS, *wheres],
        cwd=base,
        env=_env(base),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
