"""The run engine never loses a user's data: OUT's guards, the lock, temp names, the swap's kill
points, file modes and bad values (the foundation issue's defects 1-3, 6, 9, 11, 13-15)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import prep.run.guard as install_mod
from loaders import ImageShardDataset
from prep.cli.main import app
from prep.run.files import temp_path
from prep.run.guard import lock_path, locked
from prep.run.staging import OLD, RUN_DIR, remove

PACK = {"sizes": [32], "shard_size": 8}


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, [*args, "-q"])


def one_error_line(res: Any, code: int, pattern: str) -> None:
    lines = res.output.strip().splitlines()
    assert res.exit_code == code, res.output
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert re.search(pattern, lines[0]), lines[0]


@pytest.fixture
def images(raw_demo: Path, tmp_path: Path) -> Path:
    """A small copy of the demo images: class folders of 8 photos."""
    dst = tmp_path / "d" / "raw"
    for cls in sorted((raw_demo / "images").iterdir())[:2]:
        shutil.copytree(cls, dst / cls.name)
    return dst


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ---------------------------------------------------------------- 1, 13: OUT's guards


def test_overwrite_never_deletes_the_source(images: Path) -> None:
    d = images.parent
    (d / "notes.txt").write_text("mine")
    before = snapshot(d)
    one_error_line(cli("pack", str(images), str(d), "--overwrite"), 1, r"OUT .* holds .*raw.*HINT")
    one_error_line(cli("pack", str(images), str(images), "--overwrite"), 1, r"holds .*HINT")
    assert snapshot(d) == before


def test_out_dot_is_one_line(images: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(images.parent)
    one_error_line(cli("pack", "raw", ".", "--overwrite"), 1, r"holds raw")


def test_masks_inside_out_are_never_deleted(raw_demo: Path, pack_to: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    pack_to(raw_demo / "images", out, **PACK)
    shutil.copytree(raw_demo / "masks", out / "masks")
    res = cli("pack", str(raw_demo / "images"), str(out), "--masks", str(out / "masks"))
    one_error_line(res, 1, r"holds .*masks")
    assert (out / "masks").is_dir()


def test_tokenize_never_deletes_its_text(tmp_path: Path) -> None:
    (tmp_path / "d" / "text").mkdir(parents=True)
    (tmp_path / "d" / "text" / "a.txt").write_text("hello")
    res = cli("tokenize", str(tmp_path / "d" / "text"), str(tmp_path / "d"), "--overwrite")
    one_error_line(res, 1, r"holds .*text")
    assert (tmp_path / "d" / "text" / "a.txt").read_text() == "hello"


def test_overwrite_refuses_a_folder_prep_did_not_write(images: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    res = cli("pack", str(images), str(out), "--overwrite", "--resume")
    one_error_line(res, 1, r"holds files prep did not write \(thesis\.tex\)")
    assert (out / "thesis.tex").read_text() == "years of work"


def test_overwrite_refuses_a_dataset_with_a_users_file(images: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli("pack", str(images), str(out), "--sizes", "32").exit_code == 0
    (out / "notes.txt").write_text("mine")
    one_error_line(cli("pack", str(images), str(out), "--overwrite"), 1, r"\(notes\.txt\)")
    assert (out / "notes.txt").exists()
    (out / "notes.txt").unlink()
    assert cli("pack", str(images), str(out), "--sizes", "48", "--overwrite").exit_code == 0
    assert ImageShardDataset(out).sizes == [48]


def test_a_file_as_out_is_never_replaced(images: Path, tmp_path: Path) -> None:
    out = tmp_path / "file"
    out.write_text("keep")
    one_error_line(cli("pack", str(images), str(out), "--overwrite"), 1, "not an empty folder")
    assert out.read_text() == "keep"


# ---------------------------------------------------------------- 2, 3: one run at a time


def test_a_second_run_on_one_out_is_refused(images: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with locked(out):
        assert f"pid {os.getpid()} on {socket.gethostname()}" in lock_path(out).read_text()
        res = cli("pack", str(images), str(out), "--overwrite")
        one_error_line(res, 1, rf"{out} is being written by pid {os.getpid()} on .*HINT")
        res = cli("pack", str(images), str(out), "--resume")
        one_error_line(res, 1, "is being written by")
    assert not lock_path(out).exists()  # removed with the run
    assert cli("pack", str(images), str(out), "--sizes", "32").exit_code == 0
    assert not lock_path(out).exists()


def test_out_in_a_new_folder_is_made(images: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "out"
    assert cli("pack", str(images), str(out), "--sizes", "32").exit_code == 0
    assert len(ImageShardDataset(out)) > 0 and not lock_path(out).exists()


def test_temp_names_differ_across_hosts_and_processes(tmp_path: Path) -> None:
    a, b = temp_path(tmp_path / "x.npy"), temp_path(tmp_path / "x.npy")
    assert a != b and a.parent == tmp_path
    assert re.fullmatch(
        rf"\.x\.npy\.{re.escape(socket.gethostname())}-{os.getpid()}-\w{{8}}\.tmp", a.name
    )


# ---------------------------------------------------------------- 6: kill windows of the swap


class Killed(BaseException):
    """A SIGKILL at one step: nothing after it runs (no except or finally of ours does work)."""


def kill_at(step: int, monkeypatch: pytest.MonkeyPatch, exchange: bool) -> list[str]:
    """Make install's file operations raise Killed at the `step`-th one; return the log."""
    calls: list[str] = []

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def op(*args: Any, **kw: Any) -> Any:
            calls.append(name)
            if len(calls) == step:
                raise Killed(name)
            return fn(*args, **kw)

        return op

    class Os:
        replace = staticmethod(wrap("replace", os.replace))

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

    real_exchange = install_mod._exchange
    monkeypatch.setattr(install_mod, "os", Os())
    monkeypatch.setattr(install_mod, "remove", wrap("remove", install_mod.remove))
    monkeypatch.setattr(
        install_mod,
        "_exchange",
        wrap("exchange", real_exchange if exchange else lambda a, b: False),
    )
    return calls


def leftovers(out: Path) -> list[str]:
    beside = [p.name for p in out.parent.iterdir() if p.name != out.name and out.name in p.name]
    inside = [n for n in (RUN_DIR, OLD) if (out / n).exists()]
    return beside + inside + [p.name for p in out.glob(".*.tmp")]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
@pytest.mark.parametrize("step", [1, 2, 3, 4, 5])
def test_a_kill_at_any_step_of_the_swap_is_finished_by_resume(
    raw_demo: Path,
    tmp_path: Path,
    pack_to: Any,
    monkeypatch: pytest.MonkeyPatch,
    step: int,
    exchange: bool,
) -> None:
    src, out = raw_demo / "images", tmp_path / "out"
    pack_to(src, out, sizes=[32], shard_size=8)  # the old dataset
    calls = kill_at(step, monkeypatch, exchange)
    with contextlib.suppress(Killed):
        pack_to(src, out, sizes=[48], shard_size=8, overwrite=True)
    killed = len(calls) >= step
    monkeypatch.undo()
    if exchange or out.exists():
        assert ImageShardDataset(out).sizes in ([32], [48])  # OUT is always a whole dataset
    else:  # two renames have a moment without OUT: the old one waits inside the new folder
        assert (tmp_path / "out.partial" / OLD / "manifest.json").is_file()
    summary = pack_to(src, out, sizes=[48], shard_size=8, resume=True)
    assert summary.reused == summary.shards  # nothing packed again
    assert ImageShardDataset(out).sizes == [48] and len(ImageShardDataset(out)) == 24
    assert leftovers(out) == [], (calls, killed)


def test_remove_takes_a_folder_whole_and_no_file_a_link_in_it_names(tmp_path: Path) -> None:
    old, kept = tmp_path / "old", tmp_path / "kept.txt"
    (old / "sub").mkdir(parents=True)
    for i in range(70):  # enough files for the unlinking threads
        (old / f"shard-{i:05d}.npy").write_bytes(b"x" * 5000)
    (old / "sub" / "a.json").write_text("{}")
    kept.write_text("a user's file")
    (old / "link").symlink_to(kept)
    (old / "folder-link").symlink_to(tmp_path, target_is_directory=True)
    remove(old)
    assert not old.exists() and kept.read_text() == "a user's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]


# ---------------------------------------------------------------- 9, 15: bad values, names


@pytest.mark.parametrize(
    "option",
    [
        ["--mode", "foo"],
        ["--format", "zarr"],
        ["--sizes", "0"],
        ["--shard-size", "0"],
        ["--backend", "foo"],
        ["--max-rejects", "2"],
        ["--limit", "0"],
        ["--sizes", "x"],
    ],
)
def test_bad_values_exit_2(images: Path, tmp_path: Path, option: list[str]) -> None:
    res = cli("pack", str(images), str(tmp_path / "out"), *option)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert not (tmp_path / "out.partial").exists()


def test_an_out_name_over_255_bytes_is_one_line(images: Path, tmp_path: Path) -> None:
    one_error_line(cli("pack", str(images), str(tmp_path / ("x" * 300))), 2, "shorter OUT")


def test_demo_into_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("keep")
    res = CliRunner().invoke(app, ["demo", str(tmp_path / "f"), "--count", "2", "-q"])
    one_error_line(res, 1, r"f is a file.*HINT")
    assert (tmp_path / "f").read_text() == "keep"


# ---------------------------------------------------------------- 11, 14: installs and modes


def test_manifest_and_rejects_respect_the_umask(images: Path, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        assert cli("pack", str(images), str(tmp_path / "out"), "--sizes", "32").exit_code == 0
    finally:
        os.umask(old)
    out = tmp_path / "out"
    for name in ("manifest.json", "rejects.jsonl", "image_32-00000.npy"):
        assert (out / name).stat().st_mode & 0o777 == 0o644, name


def test_dependency_minimums_cover_the_apis_used() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    deps = " ".join(project["project"]["dependencies"])
    assert "joblib>=1.4" in deps  # Parallel(return_as="generator_unordered")
    assert "tokenizers>=0.20" in deps  # Tokenizer.encode_batch_fast
