"""--append on the samples run (pack_samples, prep samples): new objects and rows only, a label's
class list that grows at its end, refusals, and a killed append finished with --resume."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import prep
from loaders import SampleDataset
from loaders.format import read_manifest
from prep import PrepError
from prep.fields import Array, Label

KINDS = ("cat", "dog", "ant")


def make(v: int) -> dict[str, Any]:
    if os.environ.get("KILL_AT") == str(v):  # test_a_killed_append...: die mid-run
        os.kill(os.getpid(), signal.SIGKILL)
    return {
        "x": np.array([v, 2 * v, v * v], dtype=np.int64),
        "kind": KINDS[v % 3 if v >= 6 else v % 2],
    }


def fields(classes: tuple[str, ...] = KINDS[:2]) -> dict[str, Any]:
    return {"x": Array("int64", (3,)), "kind": Label(classes)}


def pack(n: int, out: Path, classes: tuple[str, ...] = KINDS[:2], **kw: Any) -> Any:
    kw.setdefault("jobs", 1)
    return prep.pack_samples(make, list(range(n)), out, fields(classes), show_progress=False, **kw)


def values(root: Path, **kw: Any) -> list[tuple[list[int], str]]:
    ds = SampleDataset(root, **kw)
    classes = ds.store.manifest.fields["kind"]["classes"]
    return [(ds[i]["x"].tolist(), classes[int(ds[i]["kind"])]) for i in range(len(ds))]


def expected(n: int) -> list[tuple[list[int], str]]:
    return [([v, 2 * v, v * v], make(v)["kind"]) for v in range(n)]


def test_append_objects_with_a_growing_class_list(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    pack(6, out, shard_size=4)
    first = (out / "manifest.json").read_bytes()
    s = pack(9, out, KINDS, append=True)  # the first 6 again, 3 new; class "ant" added last
    assert (s.skipped, s.packed, s.shards) == (6, 3, 1)
    assert values(out) == expected(9)
    m = read_manifest(out)
    assert m.fields["kind"]["classes"] == list(KINDS) and m.config["shard_size"] == 4
    assert m.parent == hashlib.sha256(first).hexdigest()
    assert values(out, version=m.parent) == expected(6)


def test_a_class_list_that_reorders_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    pack(6, out)
    with pytest.raises(PrepError, match="do not start with the dataset's"):
        pack(9, out, ("dog", "cat", "ant"), append=True)
    with pytest.raises(PrepError, match="field x has shape"):
        prep.pack_samples(
            make,
            list(range(9)),
            out,
            {"x": Array("int64", (4,)), "kind": Label(KINDS)},
            append=True,
            show_progress=False,
            jobs=1,
        )
    assert read_manifest(out).num_samples == 6


def test_appending_with_another_command_is_refused(tmp_path: Path) -> None:
    from prep.kinds.images.config import PackConfig
    from prep.kinds.images.pack import pack as pack_images

    out = tmp_path / "ds"
    pack(6, out)
    (tmp_path / "img" / "a").mkdir(parents=True)
    with pytest.raises(PrepError, match="written by prep samples, not prep pack"):
        pack_images(PackConfig(src=str(tmp_path / "img"), out=str(out), append=True), False)


KILLER = """
import sys
sys.path.insert(0, {tests!r})
import prep, test_append_samples as t
prep.pack_samples(t.make, list(range(14)), {out!r}, t.fields(t.KINDS), jobs=1, shard_size=2,
                  append=True, show_progress=False)
"""


@pytest.mark.slow  # a fresh interpreter: 5-8 s
def test_a_killed_append_is_finished_by_resume(tmp_path: Path) -> None:
    out, straight = tmp_path / "ds", tmp_path / "straight"
    for root in (out, straight):
        pack(6, root, shard_size=2)
    pack(14, straight, KINDS, append=True)
    code = KILLER.format(tests=str(Path(__file__).parent), out=str(out))
    env = os.environ | {"KILL_AT": "11"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, env=env)
    assert proc.returncode == -9 and (tmp_path / "ds.partial").is_dir()
    assert values(out) == expected(6)  # the old dataset, untouched
    s = pack(14, out, KINDS, append=True, resume=True)
    assert s.reused == 2 and s.packed == 8  # inputs 6-9 were finished before the kill
    assert values(out) == expected(14)
    assert files(out) == files(straight)


def files(root: Path) -> dict[str, bytes]:
    """The dataset's files, its manifest without its OUT path and parent (they name OUT), but
    the card (it names the folder)."""
    out = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file() and p.name != "README.md"}
    m = json.loads(out.pop("manifest.json"))
    m["config"].pop("out"), m.pop("parent")
    return out | {"manifest": json.dumps(m, sort_keys=True).encode()}
