"""prep compact: the small shards of many appends joined into shards of the target size (no
decode, sample order kept), as a new version whose parent stays readable unless --prune."""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from loaders import SampleDataset
from loaders.format import read_manifest
from prep.cli.main import app
from prep.kinds.grow.compact import compact
from tests.test_append_samples import KINDS, expected, pack, values


def appended(out: Path) -> bytes:
    """6 samples in shards of 2, then three appends of 2: six shards of 2; the manifest."""
    pack(6, out, shard_size=2)
    for n in (8, 10, 12):
        pack(n, out, KINDS, append=True)
    return (out / "manifest.json").read_bytes()


def test_compact_joins_shards_in_order_and_keeps_the_parent(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    before = appended(out)
    assert read_manifest(out).counts().tolist() == [2] * 6
    reader = SampleDataset(out)  # opened before: reads the same after
    result = CliRunner().invoke(app, ["compact", str(out), "--shard-size", "5"])
    assert result.exit_code == 0, result.output
    assert "6 shards -> 2, 12 samples" in result.output
    m = read_manifest(out)
    assert m.counts().tolist() == [6, 6] and m.parent == hashlib.sha256(before).hexdigest()
    assert values(out) == expected(12) == values(out, version=m.parent)
    assert [reader[i]["x"].tolist() for i in range(len(reader))] == [x for x, _ in expected(12)]
    log = CliRunner().invoke(app, ["log", str(out)]).output.splitlines()
    assert len(log) == 5 and "compact: 12 samples in 2 shards" in log[0]


def test_compact_prune_keeps_only_the_new_files(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    appended(out)
    compact(out, 12, prune=True)
    m = read_manifest(out)
    assert m.counts().tolist() == [12] and m.parent is None
    assert values(out) == expected(12)
    listed = {f for s in m.shards for f in s.files}
    on_disk = {p.name for p in out.iterdir()}
    assert on_disk == listed | {
        "manifest.json",
        "shards.npy",
        "sha256.npy",
        "rejects.jsonl",
        "README.md",
        "inputs.json",
    }
    assert CliRunner().invoke(app, ["verify", str(out)]).exit_code == 0


KILLER = """
import os, signal, sys
from pathlib import Path
import prep.kinds.grow.compact as compact

calls = 0
real = compact.sha256_file


def dying(path):  # a joined shard's files are hashed once in their final names: die at one
    global calls
    calls += 1
    if calls == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path)


compact.sha256_file = dying
compact.compact(Path(sys.argv[1]), 4)
"""


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_killed_compact_is_finished_by_resume(tmp_path: Path) -> None:
    """kill -9 inside the third new shard (its first file done, no record): --resume reuses the
    two finished shards and gives the bytes of an unbroken compact; the dataset is untouched
    until then, and no file under a final name is partial."""
    out, straight = tmp_path / "ds", tmp_path / "straight" / "ds"
    pack(12, out, KINDS, shard_size=2)  # 6 shards of 2
    (tmp_path / "ids.txt").write_text("3\n")  # a removed sample: dropped by the compact
    removed = CliRunner().invoke(app, ["remove", str(out), "--ids", str(tmp_path / "ids.txt")])
    assert removed.exit_code == 0, removed.output
    shutil.copytree(out, straight)
    compact(straight, 4)
    before = tree(out)
    killed = subprocess.run([sys.executable, "-c", KILLER, str(out), "5"], timeout=120, check=False)
    assert killed.returncode == -signal.SIGKILL
    assert tree(out) == before  # the dataset as it was: readers see the old version
    staging = tmp_path / "ds.partial"
    for path in staging.glob("*.npy"):  # whole files only under final names
        assert path.stat().st_size == 128 + np.load(path, mmap_mode="r").nbytes, path.name
    assert len(list((staging / ".prep-run").glob("0*.json"))) == 2
    result = CliRunner().invoke(app, ["compact", str(out), "--shard-size", "8", "--resume"])
    assert result.exit_code == 1 and "shard_size: 4 -> 8" in result.output  # other options
    result = CliRunner().invoke(app, ["compact", str(out), "--shard-size", "4", "--resume"])
    assert result.exit_code == 0, result.output
    assert "6 shards -> 3, 2 reused, 11 samples" in result.output
    assert tree(out) == tree(straight) and not staging.exists()
    assert [x for x, _ in values(out)] == [x for i, (x, _) in enumerate(expected(12)) if i != 3]
    again = compact(out, 4, resume=True)  # finished: nothing to do
    assert (again.before, again.after, again.reused) == (3, 3, 3) and tree(out) == tree(straight)


def test_a_compacted_dataset_grows_and_compacts_again(tmp_path: Path) -> None:
    """The parent's shards that a compact keeps (for its readers) are prep's files: the next
    append, remove and compact of the dataset accept them."""
    out = tmp_path / "ds"
    appended(out)
    compact(out, 4)
    pack(14, out, KINDS, append=True)
    (tmp_path / "ids.txt").write_text("0\n")
    result = CliRunner().invoke(app, ["remove", str(out), "--ids", str(tmp_path / "ids.txt")])
    assert result.exit_code == 0, result.output
    assert compact(out, 20).after == 1
    assert values(out) == expected(14)[1:]
    assert CliRunner().invoke(app, ["verify", str(out)]).exit_code == 0
