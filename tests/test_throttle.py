"""The throttling proxy the zstd bench reads S3 through (tests/s3server.py, issue 40): a dataset
read through it equals the local pack, and it counts the bytes it carried."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3server import BUCKET, TokenBucket, throttled

from loaders import ImageShardDataset
from loaders.format import read_manifest

FIELDS = ("image", "mask", "label")


def test_the_bucket_lets_a_burst_pass_then_makes_the_sender_wait_at_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=1000.0, burst=500, clock=lambda: now[0])
    assert bucket.take(500) == 0.0  # the burst: at once
    assert bucket.take(250) == pytest.approx(0.25)  # 250 bytes in debt at 1000 bytes/s
    now[0] = 0.25  # the sender waited: the debt is paid
    assert bucket.take(0) == 0.0
    now[0] = 10.0  # idle for long: the bucket refills to the burst, no further
    assert bucket.take(1500) == pytest.approx(1.0)


def test_a_dataset_read_through_the_proxy_equals_the_local_pack(
    packed: Path, tmp_path: Path, s3: Any
) -> None:
    url = f"s3://{BUCKET}/throttled"
    s3.put(str(packed), url, recursive=True)  # uploaded as `aws s3 cp --recursive` would
    moto = int(os.environ["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    local = ImageShardDataset(packed, size=64, fields=FIELDS)
    # a small burst at 2 MB/s: the reads wait on the bucket (the test does not time them)
    with throttled(moto, rate=2e6, burst=16 << 10) as proxy:
        remote = ImageShardDataset(
            url,
            size=64,
            fields=FIELDS,
            cache_dir=tmp_path,
            storage_options={"endpoint_url": proxy.url},
        )
        assert len(remote) == len(local) == 24
        for i in range(len(local)):
            for a, b in zip(remote[i], local[i], strict=True):
                assert np.array_equal(a.numpy(), b.numpy())
    m = read_manifest(packed)
    arrays = ("image_64", "mask_64", "label")
    shard_bytes = sum(s.files[s.arrays[a].file].bytes for s in m.shards for a in arrays)
    manifest = (packed / "manifest.json").stat().st_size
    assert shard_bytes + manifest <= proxy.down < shard_bytes + manifest + 64 * 1024
    assert proxy.up > 0
