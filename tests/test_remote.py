"""Datasets on object storage, against real servers on loopback: moto's S3 API server (through
s3fs, as a user would reach AWS) and an http.server. No other address is contacted."""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3server import BUCKET, http_server

import loaders.remote
import prep.run.remote
from loaders import ImageShardDataset, make_loader
from loaders.format import MANIFEST, FormatError
from loaders.read.samplers import ShardSampler, windows
from loaders.remote import url_of
from prep import PrepError
from prep.inspect.report import info, verify

pytestmark = pytest.mark.usefixtures("s3")


def same_samples(a: ImageShardDataset, b: ImageShardDataset) -> None:
    assert len(a) == len(b)
    for i in range(len(a)):
        for x, y in zip(a[i], b[i], strict=True):
            assert np.array_equal(x.numpy(), y.numpy())


@pytest.fixture(scope="module")
def remote_ds(raw_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The demo packed to s3://BUCKET/ds (shards of 8), and the same pack made locally."""
    from conftest import run_pack

    url = f"s3://{BUCKET}/ds"
    staging = tmp_path_factory.mktemp("staging")
    run_pack(raw_demo / "images", url, sizes=[64], shard_size=8, staging=str(staging))
    local = tmp_path_factory.mktemp("local") / "ds"
    run_pack(raw_demo / "images", local, sizes=[64], shard_size=8)
    return url, local


def test_url_of_mends_urls_that_went_through_path() -> None:
    assert url_of(Path("s3://b/ds")) == "s3://b/ds"
    assert url_of("http://127.0.0.1:80/x/") == "http://127.0.0.1:80/x"
    assert url_of(Path("file:///tmp/ds")) == "file:///tmp/ds"
    assert url_of("/tmp/ds") is None and url_of("ds") is None


def test_pack_to_s3_then_load_equals_a_local_pack(
    remote_ds: tuple[str, Path], tmp_path: Path, s3: Any
) -> None:
    url, local = remote_ds
    names = {p.rsplit("/", 1)[-1] for p in s3.find(url)}
    assert names == {p.name for p in local.iterdir()}  # no marker left, nothing else
    ds = ImageShardDataset(url, size=64, fields=("image", "label"), cache_dir=tmp_path)
    same_samples(ds, ImageShardDataset(local, size=64, fields=("image", "label")))
    assert "s3://" in repr(ds)


def test_info_and_verify_a_url(remote_ds: tuple[str, Path], s3: Any) -> None:
    url, local = remote_ds
    assert info(Path(url)).splitlines()[1:] == info(local).splitlines()[1:]
    m, problems = verify(Path(url))
    assert problems == [] and m.num_samples == 24


def test_an_existing_remote_out_needs_overwrite(raw_demo: Path, remote_ds: Any) -> None:
    from conftest import run_pack

    with pytest.raises(PrepError, match=r"already holds a dataset.*HINT: pass --overwrite"):
        run_pack(raw_demo / "images", remote_ds[0], sizes=[64], shard_size=8)


def test_files_prep_did_not_write_are_refused(raw_demo: Path, s3: Any) -> None:
    from conftest import run_pack

    s3.pipe_file(f"{BUCKET}/mine/notes.txt", b"mine")
    with pytest.raises(PrepError, match=r"holds files prep did not write \(notes.txt\)"):
        run_pack(raw_demo / "images", f"s3://{BUCKET}/mine", sizes=[64], overwrite=True)


class Killed(BaseException):
    """What a kill during the upload looks like to the run: it stops between two PUTs."""


def test_a_kill_during_upload_then_resume_uploads_only_the_rest(
    raw_demo: Path, tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import run_pack

    url, staging = f"s3://{BUCKET}/killed", str(tmp_path / "staging")
    real, sent = prep.run.remote.put, []

    def put_then_die(fs: Any, local: Path, remote: str) -> None:
        if len(sent) == 3:
            raise Killed
        real(fs, local, remote)
        sent.append(remote)

    monkeypatch.setattr(prep.run.remote, "put", put_then_die)
    with pytest.raises(Killed):
        run_pack(raw_demo / "images", url, sizes=[64], shard_size=4, staging=staging)
    assert not s3.exists(f"{url}/{MANIFEST}")  # readers see no dataset
    with pytest.raises(FormatError, match=r"manifest\.json does not exist"):
        ImageShardDataset(url, size=64, cache_dir=tmp_path / "cache")
    first = list(sent)
    sent.clear()
    monkeypatch.setattr(prep.run.remote, "put", lambda *a: (real(*a), sent.append(a[2])))
    summary = run_pack(
        raw_demo / "images", url, sizes=[64], shard_size=4, staging=staging, resume=True
    )
    assert summary.reused == summary.shards == 6  # the local build is reused
    index = len(summary.manifest.index["files"])  # shards.npy, sha256.npy
    # and rejects.jsonl and inputs.json (what --append needs, issue 37), and the card
    total = sum(len(s.files) for s in summary.manifest.shards) + 3 + index
    assert len(sent) == total - 3 and not set(sent) & set(first)
    ds = ImageShardDataset(url, size=64, fields=("image", "label"), cache_dir=tmp_path / "c")
    assert len(ds) == 24 and ds[23][1] == ImageShardDataset(url, size=64)[23][1]


def test_overwrite_keeps_the_old_dataset_readable_until_the_new_manifest(
    raw_demo: Path, tmp_path: Path, s3: Any
) -> None:
    from conftest import run_pack

    url, staging = f"s3://{BUCKET}/over", str(tmp_path / "staging")
    run_pack(raw_demo / "images", url, sizes=[64], shard_size=8, staging=staging)
    old = ImageShardDataset(url, size=64, fields=("image",), cache_dir=tmp_path / "c")
    run_pack(
        raw_demo / "images",
        url,
        sizes=[64],
        shard_size=8,
        staging=staging,
        overwrite=True,
        mode="fit",
    )
    new = ImageShardDataset(url, size=64, fields=("image",), cache_dir=tmp_path / "c")
    files = {p.split(f"{BUCKET}/over/", 1)[1] for p in s3.find(url)}
    listed = {f for s in new.store.manifest.shards for f in s.files}
    assert files == listed | {MANIFEST, "rejects.jsonl", "inputs.json", "README.md"}  # old gone
    # new images under the old names would change the old dataset: they go under v-HASH/;
    # the labels are the same bytes and stay
    assert {f.startswith("v-") for f in listed if "image" in f} == {True}
    assert {f.startswith("v-") for f in listed if "label" in f} == {False}
    with pytest.raises(FormatError, match="changed since the dataset was opened"):
        old.store._reload()


def test_a_tampered_remote_file_is_refused_and_not_cached(
    remote_ds: tuple[str, Path], tmp_path: Path, s3: Any
) -> None:
    url, _ = remote_ds
    bad = f"s3://{BUCKET}/tampered"
    s3.copy(url + "/", bad + "/", recursive=True)
    name = "image_64-00001.npy"
    data = bytearray(s3.cat_file(f"{bad}/{name}"))
    data[-1] ^= 0xFF  # same size: only the hash tells
    s3.pipe_file(f"{bad}/{name}", bytes(data))
    ds = ImageShardDataset(bad, size=64, fields=("image",), cache_dir=tmp_path)
    ds[0]  # shard 0 is fine
    with pytest.raises(FormatError, match=f"{name}: .*sha256.*refused, not cached"):
        ds[8]
    cached = [p.name for p in (tmp_path / "files").glob("??/*") if "." not in p.name]
    index = 2  # shards.npy, sha256.npy: fetched at open
    assert len(cached) == 1 + index and not list((tmp_path / "files").glob("??/*.tmp"))
    assert verify(Path(bad))[1] == [f"shard 1: {bad}/{name} checksum differs from the manifest"]


def _read_all(url: str, cache: str) -> int:
    ds = ImageShardDataset(url, size=64, fields=("image", "label"), cache_dir=cache)
    return int(sum(int(ds[i][0].sum()) for i in range(len(ds))))


def test_eight_readers_download_each_file_once(packed: Path, tmp_path: Path) -> None:
    with http_server(packed) as (url, starts):
        expected = _read_all(url, str(tmp_path / "first"))
        starts.clear()
        with mp.get_context("fork").Pool(8) as pool:
            sums = pool.starmap(_read_all, [(url, str(tmp_path / "shared"))] * 8)
    assert sums == [expected] * 8  # zero corrupt reads
    fetched = {k: v for k, v in starts.items() if k != MANIFEST}
    shards = {f"{a}-{i:05d}.npy": 1 for a in ("image_64", "label") for i in range(3)}
    assert fetched == shards | {"shards.npy": 1, "sha256.npy": 1}  # and the shard index


def test_a_network_failure_is_one_clear_error(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loaders.remote, "BACKOFF", 0.01)
    monkeypatch.setattr(loaders.remote, "CHECK_EVERY", 0.0)  # a look at the manifest a batch
    copy = shutil.copytree(packed, tmp_path / "served")
    with http_server(copy) as (url, _):
        ds = ImageShardDataset(url, size=64, fields=("image",), cache_dir=tmp_path / "c")
        ds[0]
    with pytest.raises(OSError, match=r"image_64-00001.npy: cannot read it after 4 tries.*HINT"):
        ds[8]  # the server is gone
    assert ds[1][0].shape == (3, 64, 64)  # what was cached still reads
    ds.__getitems__([0, 1])  # a batch looks at the remote manifest: that fails, and is let be


def test_a_missing_bucket_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"s3://no-such-bucket/ds/manifest.json does not exist"):
        ImageShardDataset("s3://no-such-bucket/ds", size=64, cache_dir=tmp_path)


def _cached(cache: Path) -> set[str]:
    return {p.name for p in (cache / "files").glob("??/*") if "." not in p.name}


def test_a_small_cache_limit_evicts_without_breaking_the_epoch(
    packed: Path, tmp_path: Path
) -> None:
    local = ImageShardDataset(packed, size=64, fields=("image", "mask", "label"))
    one = max(f.bytes for s in local.store.manifest.shards for f in s.files.values())
    cache = tmp_path / "cache"
    with http_server(packed) as (url, starts):
        holder = ImageShardDataset(url, size=64, fields=("image",), cache_dir=cache, max_open=1)
        holder[0]  # another reader holds shard 0's image file
        held = _cached(cache)
        ds = ImageShardDataset(
            url,
            size=64,
            fields=("image", "mask", "label"),
            cache_dir=cache,
            cache_limit=2 * one,
            max_open=2,
        )
        with pytest.warns(UserWarning, match=r"cache_limit .* below the dataset.*quasi_random"):
            make_loader(ds, batch_size=4, shuffle=True)  # random order: all shards in use
        with pytest.warns(UserWarning, match=r"cache_limit .* below one window of 8.*HINT"):
            make_loader(ds, batch_size=4, order="quasi_random")
        for _epoch in range(2):
            same_samples(ds, local)  # every file fetched again after eviction reads right
        assert held <= _cached(cache)  # never evicted while another process uses it
        files = len(local.store.manifest.shards) * 3 + 1  # and shard 0's image, held
        assert sum(starts.values()) > files  # evicted files were downloaded again
    total = sum(p.stat().st_size for p in (cache / "files").glob("??/*") if "." not in p.name)
    assert total <= 2 * one + one  # the limit, and the one file the holder keeps


def test_tokenize_to_s3_then_info_verify_and_load(tmp_path: Path, s3: Any) -> None:
    from typer.testing import CliRunner

    from loaders import DocumentDataset, TokenWindowDataset
    from prep.cli.main import app
    from prep.media.text.tokenizers import load_tokenizer

    src = tmp_path / "src"
    src.mkdir()
    for i in range(6):
        (src / f"d{i}.txt").write_text(f"document {i} " * (i + 20))
    url, local = f"s3://{BUCKET}/tok", tmp_path / "tok"
    runner = CliRunner()
    for out in (url, str(local)):
        args = ["tokenize", str(src), out, "-t", "char", "-q", "--staging", str(tmp_path / "s")]
        res = runner.invoke(app, args if out == url else args[:-2])
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["info", url])
    assert res.exit_code == 0 and res.output.startswith(f"{url}: ")
    assert "tokens" in res.output.splitlines()[0] and "tokenizer char" in res.output
    assert runner.invoke(app, ["verify", url]).exit_code == 0
    cache = tmp_path / "cache"
    a = TokenWindowDataset(url, block_size=16, cache_dir=cache)
    b = TokenWindowDataset(local, block_size=16)
    assert len(a) == len(b) and all(np.array_equal(a[i][0], b[i][0]) for i in range(len(a)))
    docs = DocumentDataset(url, split="train", cache_dir=cache)
    assert len(docs) == 6
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREP_CACHE", str(cache))  # where load_tokenizer caches the file
        assert load_tokenizer(url).decode(docs[0]) == load_tokenizer(local).decode(docs[0])
        s3.pipe_file(f"{url}/chars.json", b"{}")
        res = runner.invoke(app, ["verify", url])
        assert res.exit_code == 1 and f"tokens: {url}/chars.json checksum differs" in res.output
        env.setenv("PREP_CACHE", str(tmp_path / "fresh"))
        with pytest.raises(FormatError, match=r"chars.json: .*refused, not cached"):
            load_tokenizer(url)


def test_local_datasets_never_import_fsspec(packed: Path) -> None:
    code = (
        "import sys; sys.modules['fsspec'] = None\n"  # any import of fsspec now fails
        "from loaders import ImageShardDataset\n"
        f"ds = ImageShardDataset({str(packed)!r}, size=64); ds[0]\n"
        "import prep.run.driver, prep.inspect.report\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.fixture(scope="module")
def many(raw_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo at 32 px (and masks) in 12 shards of 2."""
    from conftest import run_pack

    out = tmp_path_factory.mktemp("many") / "ds"
    masks = str(raw_demo / "masks")
    run_pack(raw_demo / "images", out, sizes=[32], masks=masks, shard_size=2)
    return out


def _wait_for(done: Any, seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while not done():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def test_the_next_window_is_fetched_while_the_current_one_is_read(
    many: Path, tmp_path: Path
) -> None:
    from torch.utils.data import DataLoader

    from loaders.read.loader import collate_batch

    with http_server(many) as (url, starts):
        ds = ImageShardDataset(url, size=32, fields=("image", "label"), cache_dir=tmp_path)
        sampler = ShardSampler(ds.shard_sizes, "quasi_random", seed=1, window=3)
        sampler.follow(ds)
        it = iter(DataLoader(ds, batch_size=2, sampler=sampler, collate_fn=collate_batch))
        next(it)  # one batch of window 0: the sampler yields nothing more yet
        assert ds.store.backend.plan is not None and ds.store.backend.plan.position() == 0
        ahead = [int(s) for s in windows(12, seed=1, epoch=0, window=3)[1]]
        wanted = {f"image_32-{s:05d}.npy" for s in ahead}  # (labels: equal bytes, one file)
        assert _wait_for(lambda: wanted <= set(starts))  # fetched, not read
        rest = sum(len(b[0]) for b in it)
        assert rest == 22 and not any(k.startswith("mask") for k in starts)  # not read: not fetched
        assert set(starts.values()) == {1}  # prefetch and reads: one download a file


@pytest.mark.filterwarnings("error:.*cache_limit")  # 3 windows of 3 shards fit: no warning
def test_a_small_cache_follows_the_windows_with_workers(many: Path, tmp_path: Path) -> None:
    local = ImageShardDataset(many, size=32, fields=("image", "label"))
    expected = sorted(int(local[i][0].sum()) * 100 + int(local[i][1]) for i in range(len(local)))
    shard = local.store.manifest.shards[0]
    window_bytes = 3 * sum(shard.files[shard.arrays[a].file].bytes for a in ("image_32", "label"))
    with http_server(many) as (url, starts):
        ds = ImageShardDataset(
            url,
            size=32,
            fields=("image", "label"),
            cache_dir=tmp_path,
            cache_limit=3 * window_bytes,  # the windows around the sampler, of 4
        )
        loader = make_loader(ds, batch_size=2, order="quasi_random", window=3, num_workers=2)
        for _epoch in range(2):
            got = [
                int(image.sum()) * 100 + int(label)
                for images, labels in loader
                for image, label in zip(images, labels, strict=True)
            ]
            assert sorted(got) == expected  # every sample once, right, under eviction
    images = sum(n for name, n in starts.items() if name.startswith("image"))
    assert images > 12  # files were evicted and fetched again
    # The limit binds the files no process holds; each worker holds at most the windows around
    # where it last saw the sampler (3), and a worker a batch behind the other still holds the
    # window before the sampler's: it lets it go, and evicts it, at its next batch.
    total, held = _cached_bytes(tmp_path), _cached_bytes(tmp_path, held=True)
    assert total - held <= 3 * window_bytes and held <= 2 * 3 * window_bytes


def _cached_bytes(cache: Path, held: bool = False) -> int:
    """The bytes of the cache's files (held: of those a process holds now, by its .use lock)."""
    files = [p for p in (cache / "files").glob("??/*") if "." not in p.name]
    return sum(p.stat().st_size for p in files if not held or _is_held(p))


def _is_held(path: Path) -> bool:
    with open(f"{path}.use", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_eviction_keeps_the_windows_being_read_and_drops_what_was_read_first(
    tmp_path: Path,
) -> None:
    from loaders.remote.cache import FileCache
    from loaders.remote.prefetch import Follower, WindowPlan

    sha = [f"{s:064x}" for s in range(7)]  # 6 shards of this dataset; 6: another one's file
    files = [{"image": (f"image-{s}", 10, sha[s])} for s in range(6)]
    order = [int(w[0]) for w in windows(6, seed=5, epoch=0, window=1)]
    cache = FileCache(tmp_path, limit=30, hold=1)
    for age, s in enumerate([order[0], 6, order[5], order[4], order[3], order[2], order[1]]):
        path = cache.entry(sha[s])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 10)
        os.utime(path, ns=(age * 10**9, age * 10**9))  # oldest first: plain LRU's order
    plan, fetched = WindowPlan(6, seed=5, window=1), []
    follower = Follower(plan, limit=30)
    follower.read.add("image")
    plan.set(0, 2)  # the sampler yields window 2; the workers may still read window 1
    moved = follower.follow(files, fetched.append)
    assert moved is not None and follower._pool is not None
    rank, guarded, shards = moved
    assert guarded == {sha[order[k]] for k in (1, 2, 3)} and shards == {order[k] for k in (1, 2, 3)}
    follower._pool.shutdown(wait=True)
    assert sorted(fetched) == sorted(f"image-{order[k]}" for k in (2, 3))  # now and next
    cache.rank = rank
    gone = []
    for left in (6, 5, 4, 3):  # one file over the limit at a time
        cache.limit = left * 10
        before = _cached(tmp_path)
        cache.evict()
        gone += sorted(before - _cached(tmp_path))
    # read this epoch (window 0), another dataset's, then the one needed last (window 5);
    # windows 1-3 never (LRU would drop the oldest: window 0, the other one, window 5, 4)
    assert gone == [sha[order[0]], sha[6], sha[order[5]], sha[order[4]]]
    cache.limit = 10
    cache.evict()
    assert _cached(tmp_path) == {sha[order[k]] for k in (1, 2, 3)}  # over the limit: kept
    small = Follower(plan, limit=15)  # two windows do not fit: no prefetch
    small.read.add("image")
    assert small.follow(files, fetched.append) is not None and small._pool is None


def test_dask_workers_upload_their_own_shards(
    raw_demo: Path, remote_ds: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import run_pack

    pytest.importorskip("distributed")
    url, local = f"s3://{BUCKET}/dask", remote_ds[1]
    real, sent = prep.run.remote.put, []
    monkeypatch.setattr(prep.run.remote, "put", lambda *a: (real(*a), sent.append(a[2])))
    staging = tmp_path / "staging"
    opts = {"sizes": [64], "shard_size": 8, "staging": str(staging), "backend": "dask"}
    run_pack(raw_demo / "images", url, jobs=1, **opts)  # a LocalCluster of one worker
    client = sorted(name.rsplit("/", 1)[-1] for name in sent)  # the client's: rejects and index
    assert client == ["README.md", "inputs.json", "rejects.jsonl", "sha256.npy", "shards.npy"]
    left = {p.name for p in staging.glob("*/*.npy")}  # the workers removed what they uploaded
    assert left == {"shards.npy", "sha256.npy"}  # the client's shard index: uploaded by it
    ds = ImageShardDataset(url, size=64, fields=("image", "label"), cache_dir=tmp_path / "c")
    same_samples(ds, ImageShardDataset(local, size=64, fields=("image", "label")))


@pytest.mark.parametrize("rank", [0, 1])
def test_the_sampler_says_each_window_before_its_first_index(rank: int) -> None:
    sizes = [3, 5, 2, 4, 6]
    sampler = ShardSampler(sizes, "quasi_random", seed=2, window=2, num_replicas=2, rank=rank)
    said: list[tuple[int, int]] = []
    sampler.on_window = lambda epoch, k: said.append((epoch, k))
    starts = np.cumsum([0, *sizes])
    shard_of = {i: s for s in range(len(sizes)) for i in range(starts[s], starts[s + 1])}
    groups = [set(w.tolist()) for w in windows(len(sizes), seed=2, epoch=0, window=2)]
    seen = []
    for i in sampler:
        seen.append(i)
        k = said[-1][1]
        assert shard_of[i] in groups[k]  # 20 samples: no padding
    assert seen == sampler.indices(0).tolist() and [k for _, k in said] == [0, 1, 2]


def test_a_remote_jpeg_dataset_reads_in_quasi_random_windows(
    raw_demo: Path, tmp_path: Path
) -> None:
    """Ragged arrays' offsets files are followed like their data (a KeyError before)."""
    from conftest import run_pack

    from loaders import CenterCrop, make_loader

    out = tmp_path / "jpeg"
    run_pack(raw_demo / "images", out, sizes=[32], codec="jpeg", shard_size=4)
    local = ImageShardDataset(out, size=32, fields=("image", "label"), crop=CenterCrop(32, 1.0))
    want = sorted(int(local[i][0].sum()) for i in range(len(local)))
    with http_server(out) as (url, starts):
        ds = ImageShardDataset(
            url,
            size=32,
            fields=("image", "label"),
            cache_dir=tmp_path / "c",
            crop=CenterCrop(32, 1.0),
        )
        loader = make_loader(ds, batch_size=3, order="quasi_random", window=2)
        got = sorted(int(x.sum()) for b in loader for x in b[0])
        assert got == want
        assert any("offsets" in name for name in starts)


def test_the_cache_never_takes_a_sha256_as_a_path(tmp_path: Path) -> None:
    """A manifest's sha256 "../../../../some/where/label.npy" made the cache map that file as
    the shard (its size matched) and create folders and a .use file beside it (issue 23)."""
    from loaders.remote.cache import FileCache

    cache = FileCache(tmp_path / "a" / "b" / "c" / "cache", None, 4)
    sha = "../../../../some/where/label.npy"
    outside = tmp_path / "some" / "where" / "label.npy"
    outside.parent.mkdir(parents=True)
    outside.write_bytes(b"x" * 10)

    def download(f: Any) -> None:
        f.write(b"y" * 10)

    with pytest.raises(FormatError, match=r"src: the manifest's sha256 '\.\./.*64 lowercase hex"):
        cache.get(sha, 10, "src", download)
    with pytest.raises(FormatError, match="64 lowercase hex"):
        cache.get("A" * 64, 10, "src", download)  # upper case: not ours
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["label.npy", "some", "where"]


def test_a_manifest_sha256_path_at_a_url_writes_nothing_outside(
    packed: Path, tmp_path: Path
) -> None:
    from manifests import edit_manifest

    ds = shutil.copytree(packed, tmp_path / "served" / "ds")
    bad = "../../../../some/where/label.npy"
    edit_manifest(ds, lambda m: m["shards"][0]["files"]["label-00000.npy"].update(sha256=bad))
    cache = tmp_path / "a" / "b" / "c" / "cache"
    before = set(tmp_path.rglob("*"))
    with pytest.raises(FormatError, match="sha256"):
        ImageShardDataset(f"file://{ds}", size=64, cache_dir=cache)[0]
    assert {p for p in set(tmp_path.rglob("*")) - before if cache not in p.parents} <= {cache}


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from hostile import make_bases

    root = tmp_path_factory.mktemp("bases")
    return make_bases(root / "bases", root / "raw")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("labels outside classes", r"label-00001.npy: label 99 of label is not one of its classes"),
        ("ragged offsets backwards", r"image_32-offsets-00000.npy: the offsets of image_32"),
        ("a side of 0 px", r"image_hw_32: a side of image is not 1..32 px"),
    ],
)
def test_a_url_dataset_gets_the_folder_checks(
    case: str, message: str, bases: dict[str, Path], tmp_path: Path, s3: Any
) -> None:
    """A URL's files were compared by size only: labels outside classes, backwards offsets and
    sides of 0 px were read silently, and `prep verify URL` said ok (issue 23)."""
    from hostile import CASES, build

    from loaders import CenterCrop

    hostile = next(c for c in CASES if c.name == case)
    folder = build(hostile, bases, tmp_path / "ds", tmp_path / "outside")
    url = f"s3://{BUCKET}/checks/{hostile.base}"
    s3.put(str(folder), url, recursive=True)
    for root in (str(folder), f"file://{folder}", url):
        with pytest.raises(FormatError, match=message):  # at open (a folder), or at first read
            cache = {} if root == str(folder) else {"cache_dir": tmp_path / "cache"}
            ds = ImageShardDataset(root, crop=CenterCrop(32, 1.0), **cache)
            [ds[i] for i in range(len(ds))]
    local = verify(folder)[1]
    assert local and verify(Path(url))[1] == [p.replace(str(folder), url) for p in local]


def test_a_file_let_go_over_the_limit_is_evicted_at_once(tmp_path: Path) -> None:
    import hashlib

    from loaders.remote.cache import FileCache

    blobs = [bytes([i]) * 10 for i in range(3)]
    shas = [hashlib.sha256(b).hexdigest() for b in blobs]
    reader, other = FileCache(tmp_path, limit=20, hold=8), FileCache(tmp_path, limit=20, hold=8)
    for blob, sha in zip(blobs, shas, strict=True):
        cache = reader if blob != blobs[2] else other
        cache.get(sha, 10, "s3://b/x", lambda f, blob=blob: f.write(blob))
    # 30 bytes over a limit of 20: the other's fetch could not evict what the reader holds
    assert all(reader.entry(sha).exists() for sha in shas)
    reader.hold_only({shas[1]})  # lets go of the first: it goes now, not at some later fetch
    assert [reader.entry(sha).exists() for sha in shas] == [False, True, True]
