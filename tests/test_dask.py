"""Packing on a dask cluster: same bytes as loky, and a worker killed mid-shard corrupts nothing.

The cluster is a LocalCluster of two worker processes on 127.0.0.1; its workers see the test's
tmp folders as a shared file system would."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import distributed
import pytest
from typer.testing import CliRunner

from prep import PrepError, UsageError
from prep.cli.main import app
from prep.kinds.images.config import PackConfig
from prep.kinds.images.pack import pack
from prep.run.parallel import run_tasks

PACK = {"sizes": [32], "shard_size": 4}  # the 24 demo images: 6 shards


def same_dataset(a: Path, b: Path) -> None:
    """Every file byte for byte; the manifests equal but for the output path they record."""
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        if name == "manifest.json":
            ma, mb = json.loads((a / name).read_text()), json.loads((b / name).read_text())
            ma["config"].pop("out"), mb["config"].pop("out")
            assert ma == mb
        else:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def loky_pack(raw_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("loky") / "ds"
    pack(PackConfig(str(raw_demo / "images"), str(out), jobs=2, **PACK), show_progress=False)
    return out


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},  # a free port, not 8787
    ) as c:
        yield c


def kill_worker_in_shard(marker: str, after_items: int) -> None:
    """Run on every worker: the first worker to encode `after_items` + 1 items of one shard
    SIGKILLs itself there, once per marker, leaving that shard's temp files half written."""
    import prep.kinds.images.pack

    encode = prep.kinds.images.pack.encode_item
    seen: dict[int, int] = {}

    def encode_or_die(item: Any, cfg: Any, specs: Any, *sums: Any) -> Any:
        key = id(specs)  # one specs object per task call
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > after_items:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return encode(item, cfg, specs, *sums)

    encode_or_die.original = encode  # type: ignore[attr-defined]
    prep.kinds.images.pack.encode_item = encode_or_die


def restore_encode() -> None:
    import prep.kinds.images.pack

    while hasattr(prep.kinds.images.pack.encode_item, "original"):
        prep.kinds.images.pack.encode_item = prep.kinds.images.pack.encode_item.original


def drain(client: Any) -> None:
    """Return once every worker has finished the task it was running (one thread each): a task
    the failed run left running goes on after the client gave up on it."""
    workers = list(client.scheduler_info()["workers"])
    client.gather([client.submit(int, 0, workers=[w], pure=False) for w in workers])


@pytest.mark.slow
def test_cluster_pack_equals_loky(
    cluster: Any, raw_demo: Path, loky_pack: Path, tmp_path: Path
) -> None:
    out = tmp_path / "dask"
    args = ["pack", str(raw_demo / "images"), str(out), "--sizes", "32", "--shard-size", "4"]
    args += ["--backend", "dask", "--scheduler", cluster.scheduler_address, "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    same_dataset(out, loky_pack)


@pytest.mark.slow
def test_worker_killed_mid_shard_is_redone(
    cluster: Any, raw_demo: Path, loky_pack: Path, tmp_path: Path, pack_to: Any
) -> None:
    marker = tmp_path / "killed"
    with distributed.Client(cluster, set_as_default=False) as client:
        client.run(kill_worker_in_shard, str(marker), 2)
        out = tmp_path / "dask"
        pack_to(
            raw_demo / "images", out, backend="dask", scheduler=cluster.scheduler_address, **PACK
        )
        client.run(restore_encode)
    assert marker.exists()  # a worker did die mid-shard
    same_dataset(out, loky_pack)


@pytest.mark.slow
def test_worker_deaths_past_the_limit_fail_then_resume(
    cluster: Any, raw_demo: Path, loky_pack: Path, tmp_path: Path, pack_to: Any
) -> None:
    marker, out = tmp_path / "killed", tmp_path / "dask"
    before = cluster.scheduler.allowed_failures
    cluster.scheduler.allowed_failures = 0  # the first death fails its task
    try:
        with distributed.Client(cluster, set_as_default=False) as client:
            client.run(kill_worker_in_shard, str(marker), 1)
            with pytest.raises(PrepError, match=r"kept dying.*HINT.*--resume"):
                pack_to(
                    raw_demo / "images",
                    out,
                    backend="dask",
                    scheduler=cluster.scheduler_address,
                    **PACK,
                )
            client.run(restore_encode)
            drain(client)
    finally:
        cluster.scheduler.allowed_failures = before
    staging = out.with_name(out.name + ".partial")
    assert not out.exists() and staging.is_dir()
    assert not list(staging.glob(".*.tmp"))  # the half-written shard's temp files are gone
    pack_to(
        raw_demo / "images",
        out,
        backend="dask",
        scheduler=cluster.scheduler_address,
        resume=True,
        **PACK,
    )
    same_dataset(out, loky_pack)


@pytest.mark.slow
def test_local_cluster_without_address(tmp_path: Path) -> None:
    """No --scheduler: a LocalCluster of --jobs processes, none of them this one."""
    pids = sorted(run_tasks(os.getpid, [(), (), ()], 2, "dask"))
    assert os.getpid() not in pids and 1 <= len(set(pids)) <= 2


@pytest.mark.parametrize(
    ("backend", "scheduler", "message"),
    [
        ("spark", None, "--backend spark must be auto | threads | loky | dask"),
        ("loky", "tcp://127.0.0.1:8786", "needs the dask backend. HINT: add --backend dask"),
    ],
)
def test_backend_errors(backend: str, scheduler: str | None, message: str) -> None:
    cfg = PackConfig("src", "out", backend=backend, scheduler=scheduler)
    with pytest.raises(UsageError, match=re.escape(message)):
        cfg.validate()


def test_unreachable_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("prep.run.parallel.CONNECT_TIMEOUT_S", 1)
    with socket.socket() as s:  # a free port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(PrepError, match=r"cannot reach the dask scheduler.*HINT: start one"):
        list(run_tasks(abs, [(-1,)], 1, "dask", address))
