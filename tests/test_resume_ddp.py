"""A loader's state under torch.distributed (gloo, two real processes): every rank saves the
same state, a run resumed from it reads the rest of the epoch, and ranks that pass different
states are refused on every rank."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from test_distributed import _free_port

from loaders import ImageShardDataset, make_loader


def _rank_main(rank: int, port: int, root: str, out: str) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=120),
    )
    try:
        ds = ImageShardDataset(root, size=64, fields=("index",))
        loader = make_loader(ds, batch_size=3, shuffle=True, seed=4)  # distributed: automatic
        loader.sampler.set_epoch(2)
        it = iter(loader)
        read = [i for _ in range(2) for i in next(it)[0].tolist()]
        state = loader.state_dict()
        resumed = make_loader(ImageShardDataset(root, size=64, fields=("index",)), 3, True, seed=4)
        resumed.load_state_dict(state)
        resumed.sampler.set_epoch(2)
        rest = [i for (b,) in resumed for i in b.tolist()]
        try:  # rank 1 passes its own, different state
            resumed.load_state_dict({**state, "delivered": state["delivered"] + 2 * rank})
            refused = ""
        except ValueError as e:
            refused = str(e)
        result = {"read": read, "state": state, "rest": rest, "refused": refused}
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_save_one_state_and_resume_the_rest(packed: Path, tmp_path: Path) -> None:
    mp.spawn(_rank_main, args=(_free_port(), str(packed), str(tmp_path)), nprocs=2)
    ranks: list[dict[str, Any]] = [
        json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)
    ]
    assert ranks[0]["state"] == ranks[1]["state"]  # one global position
    assert ranks[0]["state"]["delivered"] == 2 * 3 * 2  # two batches of 3 on each of 2 ranks
    read = ranks[0]["read"] + ranks[1]["read"]
    rest = ranks[0]["rest"] + ranks[1]["rest"]
    assert len(set(read)) == 12 and not set(read) & set(rest)
    assert set(read) | set(rest) == set(range(24)) and len(rest) == 12  # 24: no padding
    for r in ranks:  # the same line on both ranks
        assert "ranks loaded different loader states" in r["refused"], r["refused"]
        assert "HINT" in r["refused"] and "\n" not in r["refused"]
