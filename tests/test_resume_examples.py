"""A training example killed (SIGKILL) mid-epoch and resumed with --resume from its last
checkpoint: the loss curve goes on where the checkpoint was, and the sample log has each epoch's
samples once, the steps after the checkpoint (lost with the kill) read again the same."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_pack

ROOT = Path(__file__).resolve().parents[1]


def _log(path: Path) -> dict[int, list[int]]:
    """step -> the sample indices it trained on."""
    lines = [line.split() for line in path.read_text().splitlines()]
    return {int(line[0]): [int(i) for i in line[1:]] for line in lines}


_KILLED_AT = """
import os, runpy, signal, sys
from examples import common
step = common.Checkpoint.step
def step_then_die(self, batch):
    step(self, batch)
    if self.trainer.steps == {step}:
        os.kill(os.getpid(), signal.SIGKILL)
common.Checkpoint.step = step_then_die
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _losses(out: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r"^step (\d+) loss (\S+)$", out, re.M)}


@pytest.mark.slow
def test_killed_classifier_resumes_its_epoch(raw_demo: Path, tmp_path: Path) -> None:
    data = tmp_path / "images"
    run_pack(raw_demo / "images", data, sizes=[32])  # 24 images: 21 trained on, 3 held out
    ckpt, log = tmp_path / "ckpt.pt", tmp_path / "samples.log"
    script = str(ROOT / "examples" / "train_classifier.py")
    options = [
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--width",
        "4",
        "--workers",
        "0",
        "--checkpoint-every",
        "2",
    ]
    args = ["--data", str(data), *options, "--checkpoint", str(ckpt), "--sample-log", str(log)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # The run kills itself (SIGKILL) right after step 9 is logged: mid-epoch 1 (epochs of 6
    # steps), one step after the checkpoint of step 8. A kill from outside raced the run, which
    # could finish its 12 steps before the signal came.
    first = subprocess.run(
        [sys.executable, "-c", _KILLED_AT.format(step=9), script, *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        timeout=300,  # a bound on a stuck run, not a timing check
    )
    killed_out = first.stdout
    assert first.returncode == -signal.SIGKILL
    killed = _log(log)
    log.unlink()
    again = [sys.executable, script, *args, "--resume", str(ckpt)]
    resumed = subprocess.run(again, capture_output=True, text=True, env=env, check=True)
    at = int(re.search(r"resumed at step (\d+)", resumed.stdout).group(1))  # type: ignore[union-attr]
    assert at == 8 and max(killed) == 9
    rest = _log(log)
    assert min(rest) == at + 1 and max(rest) == 12
    for step in range(at + 1, max(killed) + 1):  # lost with the kill: read again, the same
        assert rest[step] == killed[step]
    steps = {**{s: v for s, v in killed.items() if s <= at}, **rest}
    assert sorted(steps) == list(range(1, 13))
    train = sorted(set(range(24)) - {7, 15, 23})  # examples.common.holdout: every 8th held out
    for epoch in range(2):  # each epoch: every sample once, none repeated, none missed
        seen = [i for s in range(6 * epoch + 1, 6 * epoch + 7) for i in steps[s]]
        assert sorted(seen) == train, epoch
    before, after = _losses(killed_out), _losses(resumed.stdout)
    assert min(after) == at + 1
    for step in range(at + 1, max(killed) + 1):  # the curve goes on as the killed run's did
        if step in before:
            assert after[step] == pytest.approx(before[step], abs=2e-3)
