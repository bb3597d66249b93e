"""Object storage (loaders.remote.storage), the one module that talks to a URL for the readers and
for prep's uploads: a folder at a file:// URL round-trips, retries say what they were doing, and
a server that is down is one line."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
from s3server import BUCKET

from loaders.format import FormatError
from loaders.remote import storage
from loaders.remote.storage import Storage


def test_a_folder_at_a_url_round_trips(tmp_path: Path) -> None:
    local = tmp_path / "a.bin"
    local.write_bytes(b"abc" * 1000)
    box = Storage(f"file://{tmp_path}/box")
    assert box.listing() == {} and box.info("manifest.json") is None
    box.put(local, "v-123/a.bin")
    box.write("manifest.json", b"{}")
    assert box.listing() == {"v-123/a.bin": 3000, "manifest.json": 2}
    assert box.read("manifest.json") == b"{}" and box.size("v-123/a.bin") == 3000
    info = box.info("manifest.json")
    assert info is not None and info["size"] == 2 and box.info("gone.json") is None
    got = io.BytesIO(b"left over from a try before")
    box.download("v-123/a.bin", got)
    assert got.getvalue() == local.read_bytes()
    assert box.sha256("v-123/a.bin") == hashlib.sha256(local.read_bytes()).hexdigest()
    box.remove("manifest.json")
    box.remove("manifest.json")  # already gone: nothing to do
    assert box.info("manifest.json") is None
    copy = pickle.loads(pickle.dumps(box))
    assert copy._fs is None and copy.listing() == {"v-123/a.bin": 3000}


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a?b", "a/./b", ""])
def test_a_name_that_leaves_the_folder_is_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="escapes the dataset"):
        Storage(f"file://{tmp_path}").read(name)


def test_network_errors_are_tried_again_then_one_error_saying_what_failed() -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("reset")
        return "ok"

    assert storage.retried("s3://b/x", flaky, tries=3, backoff=0.0) == "ok"

    def down() -> None:
        raise ConnectionError("refused")

    with pytest.raises(OSError, match=r"s3://b/x: cannot write it after 2 tries.*HINT"):
        storage.retried("s3://b/x", down, tries=2, backoff=0.0, doing="write")
    with pytest.raises(FormatError, match=r"s3://b/x does not exist"):
        storage.retried("s3://b/x", Path("/no/such/file").read_bytes, tries=2, backoff=0.0)


@pytest.mark.parametrize("command", ["verify", "info"])
def test_a_server_that_is_down_is_one_line(command: str, tmp_path: Path) -> None:
    """`prep verify s3://...` and `prep info s3://...` printed an OSError traceback."""
    from s3server import free_port

    env = os.environ | {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_MAX_ATTEMPTS": "1",
        "PREP_CACHE": str(tmp_path),
    }
    code = (
        "import loaders.remote as r; r.BACKOFF = 0.01; from prep.cli.main import app; "
        f"app(['{command}', 's3://{BUCKET}/ds'])"
    )
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and f"s3://{BUCKET}/ds/manifest.json" in res.stderr
    assert time.monotonic() - start < 60


def test_a_pack_to_a_file_url_and_its_overwrite_read_as_local_packs(
    raw_demo: Path, tmp_path: Path
) -> None:
    """A file:// OUT failed at its first PUT (no folder on the disk); so would a v-HASH/ file."""
    from conftest import run_pack

    from loaders import ImageShardDataset

    url, local = f"file://{tmp_path}/out", tmp_path / "local"
    opts = {"sizes": [32], "shard_size": 12, "staging": str(tmp_path / "staging")}
    run_pack(raw_demo / "images", url, **opts)
    run_pack(raw_demo / "images", url, **opts, overwrite=True, mode="fit")
    run_pack(raw_demo / "images", local, sizes=[32], shard_size=12, mode="fit")
    ds = ImageShardDataset(url, size=32, fields=("image", "label"), cache_dir=tmp_path / "c")
    want = ImageShardDataset(local, size=32, fields=("image", "label"))
    assert any(f.startswith("v-") for s in ds.store.manifest.shards for f in s.files)
    assert [(int(x.sum()), int(y)) for x, y in (ds[i] for i in range(len(ds)))] == [
        (int(x.sum()), int(y)) for x, y in (want[i] for i in range(len(want)))
    ]
