"""Parallelism that does not hang on the shard count (issue 12): the default shard size comes
from the input count alone, so a small run still has a task per core, and the bytes are the
same for any --jobs and any backend; --resume reuses what a stopped run finished."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from loaders.format import read_manifest
from prep import PrepError
from prep.run.parallel import core_lent, run_tasks
from prep.run.sharding import shard_size
from prep.run.staging import RUN_DIR


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 small photos in two classes (JPEG, one rotated, one gray, PNGs) and a truncated one."""
    root = tmp_path_factory.mktemp("par") / "src"
    rng = np.random.default_rng(1)
    for i in range(40):
        folder = root / ("a" if i % 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (48 + i, 64, 3), dtype=np.uint8)
        im = Image.fromarray(pixels).convert("L" if i == 7 else "RGB")
        buf = io.BytesIO()
        if i % 5 == 0:
            im.save(buf, "PNG")
        else:
            exif = Image.Exif()
            exif[0x0112] = 6 if i == 3 else 1
            im.save(buf, "JPEG", quality=90, exif=exif.tobytes())
        (folder / f"{i:02d}.{'png' if i % 5 == 0 else 'jpg'}").write_bytes(buf.getvalue())
    whole = (root / "a" / "01.jpg").read_bytes()
    (root / "a" / "cut.jpg").write_bytes(whole[: len(whole) // 2])
    return root


def files_of(out: Path) -> dict[str, bytes]:
    """Every file's bytes; the manifest without the OUT path it records."""
    files = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    manifest = json.loads(files.pop("manifest.json"))
    manifest["config"].pop("out")
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode()
    return files


def test_default_shard_size_depends_on_the_count_alone() -> None:
    assert [shard_size(n, None) for n in (1, 41, 180, 720, 2000, 32_000, 10**6)] == [
        16,
        16,
        16,
        23,
        63,
        1000,
        1000,
    ]
    assert shard_size(720, 1000) == 1000  # an explicit --shard-size is kept


@pytest.mark.parametrize("backend", ["auto", "loky"])
def test_any_jobs_same_bytes(src: Path, tmp_path: Path, pack_to: Any, backend: str) -> None:
    """41 inputs: 3 shards (16, 16, 9) by default: -j 2 and -j 3 have work for every worker."""
    outs = {}
    for jobs in (1, 2, 3):
        out = tmp_path / f"j{jobs}"
        s = pack_to(src, out, sizes=[24, 32], jobs=jobs, max_rejects=0.1, backend=backend)
        assert (s.shards, s.packed, s.rejected) == (3, 40, 1)
        outs[jobs] = files_of(out)
    assert outs[1] == outs[2] == outs[3]
    assert [s.count for s in read_manifest(tmp_path / "j1").shards] == [16, 15, 9]  # a reject


def test_resume_after_a_stop_reuses_finished_shards(src: Path, tmp_path: Path, pack_to) -> None:
    out = tmp_path / "out"
    with pytest.raises(PrepError, match="1 of 41 inputs rejected"):  # leaves OUT.partial
        pack_to(src, out, sizes=[24], jobs=2, max_rejects=0.0)
    staging = tmp_path / "out.partial"
    (staging / RUN_DIR / "00001.json").unlink()  # as if stopped before shard 1 was recorded
    done = pack_to(src, out, sizes=[24], jobs=2, max_rejects=0.1, resume=True)
    assert (done.shards, done.reused) == (3, 2)
    fresh = tmp_path / "fresh"
    pack_to(src, fresh, sizes=[24], jobs=1, max_rejects=0.1)
    a, b = files_of(out), files_of(fresh)
    assert a == b


def test_threads_stop_every_task_when_one_fails() -> None:
    """A failing task: the error reaches the caller, the tasks still running are stopped
    (their cleanup runs), and no thread is left behind."""
    import threading
    import time

    cleaned: list[int] = []

    def task(i: int) -> int:
        if i == 0:
            time.sleep(0.05)
            raise ValueError("task 0 failed")
        try:
            for _ in range(400):  # long, in Python: stopped at its next line
                time.sleep(0.005)
            return i
        finally:
            cleaned.append(i)

    before = threading.active_count()
    with pytest.raises(ValueError, match="task 0 failed"):
        list(run_tasks(task, [(i,) for i in range(4)], 2, "threads"))
    assert threading.active_count() == before
    assert cleaned == [1]  # the task running beside 0 was stopped; 2 and 3 never started


def test_threads_a_task_waiting_on_the_disk_lends_its_core() -> None:
    """-j 2 on threads: the two first tasks wait in core_lent (as on their fsyncs) for the third,
    which runs meanwhile; tasks outside core_lent never run more than 2 at once."""
    import threading
    import time

    third = threading.Event()
    lock, running, most = threading.Lock(), [0], [0]

    def task(i: int) -> bool:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)  # work, as far as the cores are counted
        with lock:
            running[0] -= 1
        if i == 2:
            third.set()
        if i >= 2:
            return True
        with core_lent():
            return third.wait(timeout=10)  # without the core lent: no thread left for task 2

    assert list(run_tasks(task, [(i,) for i in range(8)], 2, "threads")) == [True] * 8
    assert most[0] <= 2
