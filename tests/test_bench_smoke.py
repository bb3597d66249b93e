"""`make bench` stays runnable: a tiny run of the benchmark script prints its whole table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench.py"


@pytest.mark.slow
def test_bench_smoke_prints_every_row(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [
        line for line in out.stdout.splitlines() if line.startswith("| ") and "measure" not in line
    ]
    names = [r.split("|")[1].split()[0] for r in rows]
    measures = ["1a", "1b", "1c", "1d", "2", "3", "4a", "4b", "4c", "4d", "5a", "5b", "6a", "6b"]
    measures += [f"8{c}" for c in "abcdeg"] + [f"9{c}" for c in "abcde"]  # table, remote
    measures += [f"11{c}" for c in "abcde"] + ["13a", "13b", "13c", "13d"]  # augment, jpeg
    measures += ["27aa", "27ab", "27ac", "28r", "28s"]  # audio, report
    measures += [f"28{c}" for c in "abcdefghijk"]  # near-duplicates (bench_dupes.py)
    measures += ["38a", "38b", "38c", "38d"]  # packed sequences (bench_packing.py)
    for measure in measures:
        assert measure in names, out.stdout
