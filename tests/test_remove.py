"""prep remove: samples hidden by tombstones (by index or source path) until prep compact
drops them; an append keeps them hidden; a bad line changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from loaders.format import read_manifest
from prep import PrepError
from prep.cli.main import app
from prep.kinds.grow.compact import compact
from prep.kinds.grow.remove import remove
from tests.test_append import by_source, run_pack, week1, week2


def test_remove_then_append_then_compact(tmp_path: Path) -> None:
    src, out = tmp_path / "photos", tmp_path / "ds"
    names = week1(src)  # cats c0-c4 (indices 0-4), dogs d0-d3 (5-8)
    run_pack(src, out, sizes=[16], shard_size=4)
    full = by_source(out)
    ids = tmp_path / "ids.txt"
    ids.write_text("cat/c1.png\n6\n\n")
    result = CliRunner().invoke(app, ["remove", str(out), "--ids", str(ids)])
    assert result.exit_code == 0, result.output
    assert "2 samples removed" in result.output
    m = read_manifest(out)
    assert m.removed == [1, 6] and m.num_samples == 9
    gone = {"cat/c1.png", names[6]}
    assert sorted(by_source(out)) == sorted(set(names) - gone)
    assert sorted(by_source(out, version=m.parent)) == sorted(names)  # the version before
    week2(src)
    run_pack(src, out, append=True)  # skipped as held (removed is not forgotten), 3 new
    assert len(by_source(out)) == 10 and read_manifest(out).removed == [1, 6]
    before = by_source(out)
    compact(out, 100)
    m = read_manifest(out)
    assert m.removed == [] and m.counts().tolist() == [10]
    after = by_source(out)
    assert sorted(after) == sorted(before)
    for source, (pixels, name) in before.items():
        assert (after[source][0] == pixels).all() and after[source][1] == name
    assert all((after[s][0] == full[s][0]).all() for s in full if s not in gone)


def test_a_bad_line_removes_nothing(tmp_path: Path) -> None:
    src, out = tmp_path / "photos", tmp_path / "ds"
    week1(src)
    run_pack(src, out, sizes=[16])
    before = (out / "manifest.json").read_bytes()
    ids = tmp_path / "ids.txt"
    ids.write_text("3\ncat/nope.png\n")
    with pytest.raises(PrepError, match=r"line 2: 'cat/nope\.png' is no sample"):
        remove(out, ids)
    assert (out / "manifest.json").read_bytes() == before
