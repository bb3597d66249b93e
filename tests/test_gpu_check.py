"""`make gpu-check` cannot rot: without CUDA it prints the same table with the CPU's numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"


@pytest.mark.slow
def test_gpu_check_prints_and_writes_the_table_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "table.md"
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    table = out.read_text()
    assert table in run.stdout and "CPU (" in table
    if not torch.cuda.is_available():
        assert "unmeasured on a GPU" in table
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line[:2] == "| "}
    for name in ("CUDA tests", "decode, CPU path (img/s)", "transform Normalize (ms/batch)"):
        assert name in rows, table
    assert any(r.startswith("train_classifier") for r in rows), table
    assert sum(r.startswith("transform ") for r in rows) == 11
    values = [line.split("|")[2].strip() for n, line in rows.items() if n.startswith("transform")]
    assert all(float(v) > 0 for v in values)
