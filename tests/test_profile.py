"""prep.profile (the stage timer) and pack's --profile / --limit, through the API and the CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from loaders.format import read_manifest
from prep.cli.main import app
from prep.run import profile
from prep.run.profile import (
    OTHER,
    StageTimer,
    profile_table,
    run_profiled,
    shares,
    stage,
    timed,
    timed_iter,
)

PACK_STAGES = ("list", "read", "decode", "resize", "write", "checksum")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fake perf_counter: the test sets now[0]."""
    now = [0.0]
    monkeypatch.setattr(profile.time, "perf_counter", lambda: now[0])
    return now


def test_nested_stages_are_exclusive(clock: list[float]) -> None:
    t = StageTimer()
    with t.stage("decode"):
        clock[0] = 1.0
        with t.stage("read"):
            clock[0] = 3.0
        clock[0] = 3.5
        with t.stage("read"):
            clock[0] = 4.0
        clock[0] = 6.0
    assert t.seconds == {"decode": 3.5, "read": 2.5}  # 0-1, 3-3.5, 4-6 | 1-3, 3.5-4


def test_stage_and_timed_report_only_to_the_active_timer(clock: list[float]) -> None:
    @timed("resize")
    def work(x: int) -> int:
        clock[0] += 2.0
        return x + 1

    assert work(1) == 2  # no timer active: a plain call
    with stage("write"):
        clock[0] += 1.0
    t = StageTimer()
    with t.active():
        assert work(2) == 3
        with stage("write"):
            clock[0] += 0.5
    assert work(3) == 4  # deactivated again
    assert t.seconds == {"resize": 2.0, "write": 0.5}


def _task(index: int) -> dict[str, object]:
    with stage("decode"):
        pass
    return {"index": index}


def test_run_profiled_adds_stages_only_when_enabled() -> None:
    assert run_profiled(False, _task, 3) == {"index": 3}
    rec = run_profiled(True, _task, 3)
    assert rec["index"] == 3 and set(rec["stages"]) == {"decode", OTHER}


def _parse_table(output: str) -> dict[str, tuple[float, float]]:
    """{stage: (seconds, share %)} from a profile table, its total row included."""
    rows = re.findall(r"^(\w+)\s+([\d.]+)\s+([\d.]+)%", output, flags=re.M)
    return {name: (float(seconds), float(share)) for name, seconds, share in rows}


def test_table_orders_stages_and_gives_each_its_share() -> None:
    seconds = {OTHER: 1.0, "write": 2.0, "zip": 1.0, "list": 4.0, "decode": 12.0}
    text = profile_table(seconds, workers=3)
    names = [line.split()[0] for line in text.splitlines()[1:]]
    assert names == ["list", "decode", "write", "zip", OTHER, "total"]
    assert _parse_table(text) == {  # of 20 s
        "list": (4.0, 20.0),
        "decode": (12.0, 60.0),
        "write": (2.0, 10.0),
        "zip": (1.0, 5.0),
        OTHER: (1.0, 5.0),
        "total": (20.0, 100.0),
    }
    assert "summed over 3 workers" in text
    assert shares({"read": 0.0}) == {"read": 0.0}  # nothing timed: no division by zero


def test_shares_of_a_profiled_task(clock: list[float]) -> None:
    """What no stage claims goes to "other"; each share is the stage's part of the wall time."""

    def task() -> dict[str, object]:
        clock[0] += 1.0  # unclaimed
        with stage("decode"):
            clock[0] += 6.0
            with stage("read"):
                clock[0] += 2.0
        return {}

    rec = run_profiled(True, task)
    assert rec["stages"] == {OTHER: 1.0, "decode": 6.0, "read": 2.0}
    assert shares(rec["stages"]) == pytest.approx(
        {OTHER: 100 / 9, "decode": 600 / 9, "read": 200 / 9}
    )


def _check_shares(output: str) -> dict[str, float]:
    """Each stage's printed share is its printed part of the printed total: {stage: share %}."""
    rows = _parse_table(output)
    total = rows.pop("total")[0]
    assert total == pytest.approx(sum(s for s, _ in rows.values()), abs=0.01 * len(rows))
    rounding = 0.05 + 100 * 0.01 / total  # shares print to 0.1 %, seconds to 0.01 s
    for name, (seconds, share) in rows.items():
        assert share == pytest.approx(100 * seconds / total, abs=rounding), name
    return {name: share for name, (_, share) in rows.items()}


@pytest.fixture
def slow_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage timer's clock at 10^6 x: a tiny run's stages of milliseconds print as thousands
    of seconds, so that their rounding to 0.01 s does not blur the shares (other code keeps the
    real clock)."""
    real = profile.time.perf_counter
    monkeypatch.setattr(profile, "time", SimpleNamespace(perf_counter=lambda: 1e6 * real()))


@pytest.mark.usefixtures("slow_clock")
def test_cli_profile_shares(raw_demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "p"
    args = ["pack", str(raw_demo / "images"), str(out), "--sizes", "32,16", "--limit", "6"]
    args += ["--masks", str(raw_demo / "masks"), "--shard-size", "3", "-j", "1", "--profile"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    pct = _check_shares(result.output)
    assert set(PACK_STAGES) <= set(pct), result.output
    # The named stages cover the work: "other" is what no hook claims (a few Python lines).
    assert pct.get(OTHER, 0.0) < 50, result.output
    lines = result.output.splitlines()
    assert "6 inputs, 6 packed, 0 rejected" in lines[0]  # the summary comes first
    assert "summed over 1 worker" in lines[-1]


def test_profile_sums_stages_from_worker_processes(raw_demo: Path, tmp_path: Path) -> None:
    from prep.kinds.images.config import PackConfig
    from prep.kinds.images.pack import pack

    cfg = PackConfig(
        src=str(raw_demo / "images"), out=str(tmp_path / "p"), sizes=[16], limit=4, shard_size=2
    )
    cfg.jobs, cfg.backend = 2, "loky"  # two processes: the records cross a process boundary
    summary = pack(cfg, show_progress=False, profile=True)
    assert summary.stages is not None and summary.packed == 4
    assert set(PACK_STAGES) <= set(summary.stages)
    assert '"stages":' not in (tmp_path / "p" / "manifest.json").read_text()


def test_profile_is_off_by_default(raw_demo: Path, tmp_path: Path, pack_to) -> None:
    summary = pack_to(raw_demo / "images", tmp_path / "off", sizes=[16], limit=2)
    assert summary.stages is None


@pytest.mark.parametrize("limit", [1, 5])
def test_limit_packs_exactly_n(raw_demo: Path, tmp_path: Path, limit: int) -> None:
    out = tmp_path / f"l{limit}"
    args = ["pack", str(raw_demo / "images"), str(out), "--sizes", "16", "--limit", str(limit)]
    result = CliRunner().invoke(app, [*args, "-j", "1", "--shard-size", "2"])
    assert result.exit_code == 0, result.output
    m = read_manifest(out)
    assert m.num_samples == limit
    assert len(m.shards) == -(-limit // 2)
    assert f"{limit} inputs, {limit} packed" in result.output
    assert json.loads((out / "manifest.json").read_text())["config"]["limit"] == limit


@pytest.mark.usefixtures("slow_clock")
def test_cli_tokenize_profile(raw_demo: Path, tmp_path: Path) -> None:
    args = ["tokenize", str(raw_demo / "text"), str(tmp_path / "t"), "-j", "1", "--limit", "8"]
    result = CliRunner().invoke(app, [*args, "--profile"])
    assert result.exit_code == 0, result.output
    pct = _check_shares(result.output)
    assert {"list", "fit", "read", "tokenize", "write", "checksum"} <= set(pct)
    assert "8 documents" in result.output.splitlines()[0]


def test_timed_iter_times_each_step(clock: list[float]) -> None:
    def slow() -> Iterator[int]:
        for i in range(3):
            clock[0] += 1.0
            yield i
        clock[0] += 0.5  # the work before StopIteration counts too

    t = StageTimer()
    with t.active():
        items = []
        for i in timed_iter("read", slow()):
            items.append(i)
            clock[0] += 10.0  # the loop body is not the iterator's time
    assert items == [0, 1, 2] and t.seconds == {"read": 3.5}
