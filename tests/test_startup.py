"""Start-up (issue 40): what `prep pack` imports, and the command line's values coerced without
pydantic exactly as Typer's own coercion gives them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import pytest
import typer
from PIL import Image
from typer.core import TyperGroup
from typer.testing import CliRunner

from loaders.format import read_manifest
from prep.cli.group import Group

ROOT = Path(__file__).resolve().parents[1]
# Modules a one-image pack does without: torch (the loaders' side), pydantic (Typer's coercion
# and the config check, ~100 ms), tqdm and multiprocessing (a bar nobody sees), rich (help only),
# pandas and pyarrow (tables), socket (remote datasets), tomllib (no config file given).
NOT_IMPORTED = ("torch", "pydantic", "tqdm", "multiprocessing", "rich", "pandas", "pyarrow")
NOT_IMPORTED += ("socket", "tomllib")
# Nor the other commands' config dataclasses (prep.cli.group makes a command when asked for),
# nor remote datasets' package.
NOT_MODULES = ("prep.kinds.audio.config", "prep.kinds.importers.config", "prep.kinds.text.config")
NOT_MODULES += ("loaders.remote",)


def _modules_after(argv: list[str], tmp_path: Path) -> set[str]:
    """The modules a fresh `prep ARGV` process has imported when it exits."""
    seen = tmp_path / "modules.json"
    code = (
        "import atexit, json, sys\n"
        f"atexit.register(lambda: open({str(seen)!r}, 'w').write(json.dumps(list(sys.modules))))\n"
        "from prep.cli import app\n"
        "sys.argv[0] = 'prep'\n"
        "app()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    return set(json.loads(seen.read_text()))


def test_pack_one_image_imports_no_torch_pydantic_or_tqdm(tmp_path: Path) -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "a.jpg", quality=95)
    (tmp_path / "one.csv").write_text(f"path,label\n{tmp_path / 'a.jpg'},cat\n")
    out = tmp_path / "packed"
    argv = ["pack", str(tmp_path / "one.csv"), str(out), "--sizes", "32", "-q", "-j", "1"]
    modules = _modules_after(argv, tmp_path)
    assert read_manifest(out).num_samples == 1  # the pack ran, and imported what it needs
    top = {m.split(".")[0] for m in modules}
    assert {"numpy", "typer", "cv2"} <= top and "prep.kinds.images.config" in modules
    assert sorted(top & set(NOT_IMPORTED)) == []
    assert sorted(modules & set(NOT_MODULES)) == []


def _app(cls: type[TyperGroup]) -> typer.Typer:
    """One command with each plain kind of option prep has, printing what it was given."""
    app = typer.Typer(cls=cls, add_completion=False, pretty_exceptions_enable=False)

    @app.command()
    def show(
        paths: Annotated[list[Path], typer.Argument()],
        name: Annotated[Optional[str], typer.Option()] = None,
        jobs: Annotated[Optional[int], typer.Option("--jobs", "-j")] = None,
        rate: Annotated[Optional[float], typer.Option()] = None,
        gray: Annotated[Optional[bool], typer.Option("--gray/--rgb")] = None,
        out: Annotated[Optional[Path], typer.Option()] = None,
    ) -> None:
        typer.echo(repr((paths, name, jobs, rate, gray, out)))

    @app.command()
    def other() -> None:  # two commands: `show` is a sub-command, as prep's are
        pass

    return app


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "a", "b/c"],
        ["show", "a", "--name", "x y", "-j", "3", "--rate", "0.5", "--gray", "--out", "o"],
        ["show", "a", "-j", " 7 ", "--rate", "1e-3", "--rgb"],
        ["show", "a", "-j", "+2", "--rate", "-.5"],
        ["show", "a", "-j", "1.0", "--rate", "inf"],  # matched by pydantic, not by the patterns
        ["show", "a", "-j", "1_000", "--rate", "1_0.5"],
        ["show", "a", "-j", "x"],
        ["show", "a", "--rate", "fast"],
        ["show", "a", "-j", "1e3"],
        ["show"],
    ],
)
def test_plain_coercion_equals_typers(argv: list[str]) -> None:
    runner = CliRunner()
    ours, typers = runner.invoke(_app(Group), argv), runner.invoke(_app(TyperGroup), argv)
    assert (ours.exit_code, ours.output) == (typers.exit_code, typers.output)


def test_commands_listed_in_their_order_and_made_when_asked_for() -> None:
    from prep.cli.main import app

    group = typer.main.get_command(app)
    ctx = typer.Context(group, info_name="prep")
    writers = ["pack", "resize", "grayscale", "tokenize", "audio", "volumes", "samples", "table"]
    assert group.list_commands(ctx)[:10] == [*writers, "video", "upgrade"]
    assert group.list_commands(ctx)[-3:] == ["issues", "labels", "import"]
    assert "pack" not in group.commands  # not made until asked for
    pack = group.get_command(ctx, "pack")
    assert group.get_command(ctx, "pack") is pack and pack.name == "pack"
    assert {"--sizes", "--jobs", "--quiet"} <= {o for p in pack.params for o in p.opts}
    imports = group.get_command(ctx, "import")
    assert imports.list_commands(ctx) == ["coco", "pairs", "hf", "webdataset"]


def test_help_prints_without_rich_and_keeps_each_example_whole(tmp_path: Path) -> None:
    from prep.cli.main import app

    assert "rich" not in {m.split(".")[0] for m in _modules_after(["--help"], tmp_path)}
    top = {m.split(".")[0] for m in _modules_after(["pack", "--help"], tmp_path)}
    assert not top & {"rich", "numpy"}  # one command's help: its options, no data library
    pack = CliRunner().invoke(app, ["pack", "--help"], terminal_width=80)
    example = (
        "Example: prep pack data/raw/images data/packed --sizes 128,256 --masks data/raw/masks"
    )
    assert pack.exit_code == 0 and f"\n  {example}\n" in pack.output  # one line, wider than 80
    assert "(default: 256)" in " ".join(pack.output.split())  # the options, rewrapped
    listing = CliRunner().invoke(app, ["--help"], terminal_width=80).output
    flat = " ".join(listing.split())  # each command by its help's first paragraph, whole
    assert "dupes Near-duplicate groups of a dataset's images (perceptual hash" in flat
    assert "--against-split, as SampleDataset(root, split=...) does. log The" in flat


def test_the_cyclic_gc_is_off_for_start_up_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off while the command line starts (Group.main), on for a writing command's run, and as it
    was after: on, nothing left frozen (a process that runs commands in turn collects its
    garbage)."""
    import gc

    import prep.kinds.images.pack

    seen: list[tuple[bool, int]] = []
    real = prep.kinds.images.pack.pack

    def pack(*args: Any, **kwargs: Any) -> Any:
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        return real(*args, **kwargs)

    monkeypatch.setattr(prep.kinds.images.pack, "pack", pack)
    Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "a.jpg")
    (tmp_path / "one.csv").write_text(f"path,label\n{tmp_path / 'a.jpg'},cat\n")
    from prep.cli import app

    argv = ["pack", str(tmp_path / "one.csv"), str(tmp_path / "o"), "--sizes", "16", "-j", "1"]
    done = CliRunner().invoke(app, argv)
    assert done.exit_code == 0, done.output
    assert seen and seen[0][0] and seen[0][1] > 0  # on, the start-up's objects frozen
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_commands_run_one_blas_thread() -> None:
    """numpy's OpenBLAS pool spins a thread a core between the pack tasks' small DCTs: the
    command line keeps it to one thread, unless the user says otherwise."""
    code = (
        "import prep.cli, numpy, threadpoolctl\n"
        "print(max(p['num_threads'] for p in threadpoolctl.threadpool_info()"
        " if p['internal_api'] == 'openblas'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = str(ROOT)
    threads = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert threads.returncode == 0, threads.stderr
    assert threads.stdout.strip() == "1"
    env["OPENBLAS_NUM_THREADS"] = "2"
    theirs = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert theirs.stdout.strip() == "2", theirs.stderr
