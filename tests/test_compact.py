"""prep compact: the small shards of many appends joined into shards of the target size (no
decode, sample order kept), as a new version whose parent stays readable unless --prune."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
