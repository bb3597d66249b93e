"""A reader in the middle of an epoch is unaffected by appends: a dataset keeps the version it
opened (its workers too); with refresh=True, set_epoch moves it to the newest version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import prep
from loaders import SampleDataset, make_loader
from prep.fields import Array

START, EACH, APPENDS = 8, 2, 50
FIELDS = {"x": Array("int64", (2,))}


def make(v: int) -> dict[str, Any]:
    return {"x": np.array([v, 1000 + v], dtype=np.int64)}


def pack(n: int, out: Path, **kw: Any) -> Any:
    return prep.pack_samples(make, list(range(n)), out, FIELDS, show_progress=False, jobs=1, **kw)


def expected(n: int) -> list[list[int]]:
    return [[v, 1000 + v] for v in range(n)]


APPENDER = """
import sys
sys.path.insert(0, {tests!r})
import test_append_readers as t
for k in range(1, t.APPENDS + 1):
    t.pack(t.START + k * t.EACH, {out!r}, append=True)
"""


def read(ds: SampleDataset, workers: int) -> list[list[int]]:
    """One epoch, a batch at a time (the main process checks the manifest every batch)."""
    loader = make_loader(ds, batch_size=3, num_workers=workers)
    return torch.cat([b["x"] for b in loader]).tolist() if len(ds) else []


@pytest.mark.slow
def test_readers_see_the_version_they_opened_while_another_process_appends(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ds"
    pack(START, out, shard_size=3)
    pinned = SampleDataset(out, fields=("x",))
    moving = SampleDataset(out, fields=("x",), refresh=True)
    code = APPENDER.format(tests=str(Path(__file__).parent), out=str(out))
    appender = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    epoch, sizes = 0, []
    while appender.poll() is None or epoch < 2:
        for ds in (pinned, moving):
            ds.set_epoch(epoch)
        assert read(pinned, 0) == expected(START)  # every epoch: the version it opened
        n = len(moving)
        assert read(moving, 0) == expected(n)  # the version set_epoch picked, all epoch long
        sizes.append(n)
        epoch += 1
    assert appender.wait() == 0, appender.stderr.read() if appender.stderr else ""
    moving.set_epoch(epoch)
    assert len(moving) == START + APPENDS * EACH and len(set(sizes)) > 1  # it moved on
    assert read(moving, 2) == expected(START + APPENDS * EACH)  # workers follow set_epoch
    assert read(pinned, 2) == expected(START)  # workers read the version opened


def test_workers_keep_the_opened_version_across_an_append(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    pack(START, out, shard_size=3)
    pinned = SampleDataset(out, fields=("x",))
    moving = SampleDataset(out, fields=("x",), refresh=True)
    loaders = [make_loader(ds, batch_size=3, num_workers=1) for ds in (pinned, moving)]
    firsts = [next(iter(loader))["x"].tolist() for loader in loaders]  # workers started
    pack(START + 4, out, append=True)
    assert [torch.cat([b["x"] for b in loader]).tolist() for loader in loaders] == [
        expected(START)
    ] * 2
    moving.set_epoch(1)
    assert len(moving) == START + 4 and len(pinned) == START
    assert torch.cat([b["x"] for b in loaders[1]]).tolist() == expected(START + 4)
    assert firsts == [expected(3)] * 2
