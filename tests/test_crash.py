"""Crashes and reruns: SIGKILL then --resume gives the same bytes, Ctrl-C cleans up, a failed
write names the file and leaves nothing under a final name, --overwrite keeps the old dataset.

The subprocess tests run the real `prep` command (.venv/bin/prep) as a user would."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import group_gone
from typer.testing import CliRunner

import prep.kinds.images.pack
from loaders import ImageShardDataset
from loaders.fields.checks import check_files
from loaders.format import read_manifest
from prep import PrepError
from prep.cli.main import app
from prep.run.staging import RUN_DIR, load_record

PREP = str(Path(sys.executable).with_name("prep"))
OPTIONS = ["--sizes", "32,48", "--shard-size", "3", "--max-rejects", "0.5", "-q"]
PACK = {"sizes": [32, 48], "shard_size": 3, "max_rejects": 0.5}


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def assert_same(a: Path, b: Path) -> None:
    """Byte-identical folders (both written to the same OUT path, so manifests too)."""
    fa, fb = files_of(a), files_of(b)
    assert sorted(fa) == sorted(fb)
    for name in fa:
        assert fa[name] == fb[name], name


def temps(staging: Path) -> list[str]:
    return sorted(p.name for p in staging.rglob("*.tmp")) if staging.exists() else []


@pytest.fixture(scope="module")
def src(raw_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo images plus two broken files (so that rejects are resumed too)."""
    root = tmp_path_factory.mktemp("crash") / "src"
    shutil.copytree(raw_demo / "images", root)
    (root / "circle" / "empty.jpg").write_bytes(b"")
    first = sorted((root / "square").iterdir())[0]
    (root / "square" / "cut.jpg").write_bytes(first.read_bytes()[:3000])
    return root


@pytest.fixture(scope="module")
def reference(src: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    """The uninterrupted result for an OUT path: packed here, then moved aside to compare."""
    made: dict[Path, Path] = {}
    keep = tmp_path_factory.mktemp("reference")

    def get(out: Path) -> Path:
        if out not in made:
            prep.kinds.images.pack.pack(
                prep.kinds.images.pack.PackConfig(src=str(src), out=str(out), jobs=1, **PACK),
                show_progress=False,
            )
            made[out] = keep / f"ref{len(made)}"
            os.replace(out, made[out])
        return made[out]

    return get


def start(src: Path, out: Path, *extra: str, **kw: Any) -> subprocess.Popen[str]:
    then = kw.pop("preexec_fn", None)

    def child() -> None:
        # A terminal's foreground job takes Ctrl-C; a job started with `&` by a shell without
        # job control (a CI script) inherits SIGINT ignored, and Python then never raises
        # KeyboardInterrupt: give the run the terminal's default, as the tests mean it.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if then is not None:
            then()

    kw["preexec_fn"] = child
    return subprocess.Popen(
        [PREP, "pack", str(src), str(out), *OPTIONS, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell job
        **kw,
    )


def wait_for(p: subprocess.Popen[str], ready: Callable[[], bool], limit_s: float = 120) -> None:
    """Poll until `ready()` or the process ends (a guard against a hang, not a measurement)."""
    deadline = time.monotonic() + limit_s
    while p.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.005)


def finished_shards(staging: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of the files of every shard with a valid record: must not be redone."""
    out: dict[str, tuple[int, int]] = {}
    for rec_file in sorted((staging / RUN_DIR).glob("0*.json")) if staging.exists() else []:
        rec = load_record(staging, int(rec_file.stem), verify=True)
        for name in rec["shard"]["files"] if rec else []:
            st = (staging / name).stat()
            out[name] = (st.st_ino, st.st_mtime_ns)
    return out


def a_shard_finished(staging: Path) -> bool:
    """A shard's record is there (written last, atomically): a cheap look, polled every 5 ms,
    so that a signal lands while later shards still run."""
    return staging.exists() and any((staging / RUN_DIR).glob("0*.json"))


def interrupted(
    src: Path, out: Path, stop: Callable[[subprocess.Popen[str]], None]
) -> tuple[subprocess.Popen[str], str]:
    """A loky pack (worker processes: the threads of --backend auto finish these tiny shards
    before a signal lands; their stop is tested in test_pack_parallel and in-process below)
    `stop`ped once a shard is finished: (the process, its stderr). A run that finished all its
    shards before the signal came is run again (at most 5 times): it says nothing of a stop."""
    for _ in range(5):
        p = start(src, out, "-j", "2", "--backend", "loky")
        wait_for(p, lambda: a_shard_finished(out.with_name(out.name + ".partial")))
        with contextlib.suppress(ProcessLookupError):  # ended already: a run too quick
            stop(p)
        _, err = p.communicate()
        if p.returncode != 0:
            return p, err
        shutil.rmtree(out)
    raise AssertionError("5 runs finished before the signal: give the test more shards")


def check_final_names(staging: Path) -> None:
    """Every file under a final name is whole: its .npy header matches its size."""
    for path in staging.glob("*.npy"):
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        assert path.stat().st_size == 128 + arr.nbytes, path.name


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(src: Path, tmp_path: Path, reference: Any) -> None:
    out = tmp_path / "out"
    ref = reference(out)
    staging = tmp_path / "out.partial"
    rng = random.Random(5)
    kept: dict[str, tuple[int, int]] = {}
    moments = [  # each plus a random 0-150 ms
        ("any time", lambda: False),  # after 0.2-2 s: starting, listing or writing
        ("plan written", lambda: (staging / RUN_DIR / "plan.json").exists()),
        ("shard being written", lambda: bool(temps(staging))),
        ("after a record", lambda: len(finished_shards(staging)) > len(kept)),
    ]
    for round_, (what, ready) in enumerate(moments):
        p = start(src, out, *(["--resume"] if round_ else []))
        wait_for(p, ready, limit_s=rng.uniform(0.2, 2.0) if what == "any time" else 120)
        time.sleep(rng.uniform(0, 0.15))
        with contextlib.suppress(ProcessLookupError):  # unless it finished first
            if round_ % 2:
                os.kill(p.pid, signal.SIGKILL)  # the parent only: its workers are orphaned
            else:
                os.killpg(p.pid, signal.SIGKILL)  # the whole job
        _, err = p.communicate()
        assert p.returncode in (0, -signal.SIGKILL), err
        assert group_gone(p.pid), f"round {round_}: processes left running"
        if (out / "manifest.json").exists():  # killed after the swap: complete and whole
            assert check_files(out, read_manifest(out), checksums=True) == [], what
        if staging.exists():
            check_final_names(staging)
        now = finished_shards(staging)
        assert all(now[name] == kept[name] for name in kept if name in now), what
        kept = now
    result = subprocess.run(
        [PREP, "pack", str(src), str(out), *OPTIONS, "--resume"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    shards = len(read_manifest(out).shards)
    reused = int(re.search(r"\((\d+) reused\)", result.stdout).group(1))  # type: ignore[union-attr]
    assert reused >= len({name.rsplit("-", 1)[1] for name in kept})  # finished shards not redone
    assert_same(out, ref)
    for name, (ino, mtime) in kept.items():  # the very files the killed runs finished
        st = (out / name).stat()
        assert (st.st_ino, st.st_mtime_ns) == (ino, mtime), name
    assert not staging.exists() and shards == 9


@pytest.mark.slow
def test_ctrl_c_stops_workers_removes_temps(src: Path, tmp_path: Path, reference: Any) -> None:
    out = tmp_path / "out"
    ref = reference(out)
    staging = tmp_path / "out.partial"
    p, err = interrupted(src, out, lambda p: os.killpg(p.pid, signal.SIGINT))  # as Ctrl-C does
    assert group_gone(p.pid), "workers left running"
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted: temp files removed")
    assert temps(staging) == [] and not out.exists()
    assert not (staging / "manifest.json").exists()
    check_final_names(staging)
    done = subprocess.run([PREP, "pack", str(src), str(out), *OPTIONS, "--resume"], check=False)
    assert done.returncode == 0
    assert_same(out, ref)


@pytest.mark.slow
def test_sigterm_to_the_parent_ends_like_ctrl_c(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    staging = tmp_path / "out.partial"
    # the parent only, as `kill` or a scheduler's stop
    p, err = interrupted(src, out, lambda p: os.kill(p.pid, signal.SIGTERM))
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted: temp files removed")
    assert temps(staging) == [] and not out.exists()
    assert not (staging / "manifest.json").exists()
    assert group_gone(p.pid), "workers left running"


def test_keyboard_interrupt_in_process(src: Path, tmp_path: Path, monkeypatch: Any) -> None:
    encode, calls = prep.kinds.images.pack.encode_item, []

    def interrupted(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 5:  # in the second shard, after the first was finished
            raise KeyboardInterrupt
        return encode(*args)

    monkeypatch.setattr(prep.kinds.images.pack, "encode_item", interrupted)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["pack", str(src), str(out), *OPTIONS, "-j", "1"])
    assert result.exit_code == 130
    staging = tmp_path / "out.partial"
    assert temps(staging) == [] and not out.exists() and not (staging / "manifest.json").exists()
    # the first shard's four arrays, its source paths (data and offsets: issue 24), its
    # perceptual hashes and pixel digests (issue 28), its quality scores and colour (issue 39)
    assert len(finished_shards(staging)) == 10


def _rlimit(max_bytes: int) -> Callable[[], None]:
    def limit() -> None:  # in the child: Python ignores SIGXFSZ, so a write fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_write_error_names_the_file(src: Path, tmp_path: Path, jobs: str) -> None:
    """A write that fails (here: a file size limit, as a full disk) exits 1 with one line naming
    the file, and leaves no file under a final name and no temp file."""
    out = tmp_path / "out"
    p = start(src, out, "-j", jobs, "--shard-size", "8", preexec_fn=_rlimit(20_000))
    _, err = p.communicate()
    assert p.returncode == 1
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    # .NAME.HOST-PID-RANDOM.tmp
    temp = r"out\.partial/\.image_\d+-\d+\.npy\.[\w.-]+-\d+-[0-9a-f]{8}\.tmp"
    assert re.match(rf"error: cannot write .*{temp}: File too large\. HINT: ", err)
    staging = tmp_path / "out.partial"
    assert temps(staging) == [] and not out.exists()
    assert sorted(p.name for p in staging.iterdir()) == [RUN_DIR]  # nothing under a final name


def _fail_fsync_of(name: str, monkeypatch: Any) -> None:
    """os.fsync fails with ENOSPC for files whose name contains `name`, as on a full disk."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if name in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_disk_full_on_a_shard(src: Path, tmp_path: Path, pack_to: Any, monkeypatch: Any) -> None:
    _fail_fsync_of("image_48-00002", monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(
        PrepError,
        match=r"cannot write .*/\.image_48-00002\.npy\.[\w.-]+\.tmp: No space left on device",
    ):
        pack_to(src, out, **PACK)
    staging = tmp_path / "out.partial"
    assert temps(staging) == [] and not out.exists()
    assert "image_48-00002.npy" not in os.listdir(staging)  # not under its final name
    monkeypatch.undo()
    pack_to(src, out, resume=True, **PACK)  # the finished shards are reused
    assert check_files(out, read_manifest(out), checksums=True) == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_overwrite_keeps_the_old_dataset(
    src: Path, tmp_path: Path, pack_to: Any, monkeypatch: Any
) -> None:
    out = tmp_path / "out"
    pack_to(src, out, sizes=[24], shard_size=50, max_rejects=0.5)
    old = files_of(out)
    old_images = ImageShardDataset(out, fields=("image",)).__getitems__(list(range(24))).tensors[0]
    encode, checked = prep.kinds.images.pack.encode_item, []

    def check_old_then_encode(*args: Any) -> Any:  # during the new run: the old one still reads
        if not checked:
            ds = ImageShardDataset(out, fields=("image",))
            assert ds.size == 24 and np.array_equal(
                ds.__getitems__(list(range(24))).tensors[0], old_images
            )
            checked.append(True)
        return encode(*args)

    monkeypatch.setattr(prep.kinds.images.pack, "encode_item", check_old_then_encode)
    _fail_fsync_of("manifest.json", monkeypatch)  # the new run fails at its very last write
    with pytest.raises(
        PrepError, match=r"cannot write .*/out\.partial/\.manifest\.json\.[\w.-]+\.tmp: No space"
    ):
        pack_to(src, out, overwrite=True, **PACK)
    assert checked and files_of(out) == old
    monkeypatch.undo()
    monkeypatch.setattr(prep.kinds.images.pack, "encode_item", check_old_then_encode)
    checked.clear()
    pack_to(src, out, overwrite=True, **PACK)  # and when it succeeds, the new one replaces it
    assert checked and read_manifest(out).sizes() == [32, 48]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging, no old copy left


def test_resume_refuses_another_config(src: Path, tmp_path: Path, pack_to: Any) -> None:
    out = tmp_path / "out"
    with pytest.raises(PrepError, match="inputs rejected"):  # leaves an unfinished run
        pack_to(src, out, sizes=[32, 48], shard_size=3, max_rejects=0.0)
    with pytest.raises(
        PrepError,
        match=r"cannot resume .*: the config changed \(sizes: \[32, 48\] -> \[32\]\).*HINT",
    ):
        pack_to(src, out, sizes=[32], shard_size=3, max_rejects=0.5, resume=True)
    (src / "triangle" / "extra.png").write_bytes(b"")
    try:
        with pytest.raises(PrepError, match=r"the input files changed \(26 then, 27 now\)"):
            pack_to(src, out, resume=True, **PACK)
    finally:
        (src / "triangle" / "extra.png").unlink()
    done = pack_to(src, out, resume=True, **PACK)
    assert done.reused == done.shards == 9
    # A complete dataset: --resume has nothing to do, or refuses another config.
    again = pack_to(src, out, resume=True, **PACK)
    assert (again.packed, again.rejected, again.reused) == (24, 2, 9)
    with pytest.raises(
        PrepError, match=r"cannot resume .*out: it is complete, and the config changed \(mode"
    ):
        pack_to(src, out, resume=True, mode="fit", **PACK)


def _killed_run(src: Path, tmp_path: Path, pack_to: Any, reference: Any) -> tuple[Path, Any]:
    """A pack into tmp_path/out stopped by its rejects (its staging left), and the reference
    dataset a whole run of it makes."""
    out = tmp_path / "out"
    ref = reference(out)
    with pytest.raises(PrepError):
        pack_to(src, out, sizes=[32, 48], shard_size=3, max_rejects=0.0)
    return out, ref


def test_stale_temps_of_a_killed_run_are_removed(
    src: Path, tmp_path: Path, pack_to: Any, reference: Any
) -> None:
    out, ref = _killed_run(src, tmp_path, pack_to, reference)
    staging = tmp_path / "out.partial"
    for name in (
        ".image_32-00004.999.npy.tmp",
        ".manifest.json.abc.tmp",
        f"{RUN_DIR}/.00004.json.x.tmp",
    ):
        (staging / name).write_bytes(b"half written")
    (staging / RUN_DIR / "00004.json").write_text("{truncated")  # a record cut short: redone
    pack_to(src, out, resume=True, **PACK)
    assert_same(out, ref)
    assert json.loads((out / "manifest.json").read_text())["num_samples"] == 24


def test_a_plan_cut_short_by_a_power_loss_starts_the_run_again(
    src: Path, tmp_path: Path, pack_to: Any, reference: Any
) -> None:
    out, ref = _killed_run(src, tmp_path, pack_to, reference)
    (tmp_path / "out.partial" / RUN_DIR / "plan.json").write_text("")  # written without fsync
    pack_to(src, out, resume=True, **PACK)
    assert_same(out, ref)


def test_the_run_folder_is_synced_whole_before_the_swap(
    src: Path, tmp_path: Path, pack_to: Any, monkeypatch: Any
) -> None:
    import prep.run.guard as guard

    out, synced, sync_all = tmp_path / "out", [], guard.sync_all

    def sync(files: list[Path]) -> None:  # what is fsynced, and whether OUT is there yet
        synced.append(([Path(f) for f in files], out.exists()))
        sync_all(files)

    monkeypatch.setattr(guard, "sync_all", sync)
    pack_to(src, out, **PACK)
    [(files, swapped)] = synced
    staging = tmp_path / "out.partial"
    assert not swapped and staging in files  # the folder: every name in it
    assert sorted(f.name for f in files if f != staging) == sorted(os.listdir(out))
