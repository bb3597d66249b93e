"""The shard store: bounded open maps, repack detection, small pickles.

Datasets of thousands of shards are written here directly with numpy and the `loaders.format`
types (packing 5,000 shards through `prep pack` would take minutes)."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pickle
import subprocess
import sys
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from manifests import edit_manifest

from loaders import ImageShardDataset, TokenWindowDataset, make_loader
from loaders.fields import Image, Label, Tokens
from loaders.format import MANIFEST, ArrayRef, FileInfo, FormatError, Manifest, Shard
from loaders.format.schema import array_name

SIZE = 8  # px: tiny images, the shard count is what matters here


def _save(root: Path, rel: str, data: np.ndarray) -> tuple[ArrayRef, FileInfo]:
    np.save(root / rel, data, allow_pickle=False)
    digest = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    return ArrayRef(rel, len(data)), FileInfo((root / rel).stat().st_size, digest)


def write_images(root: Path, shards: int, classes: int, per_shard: int = 2) -> Path:
    """An image dataset of `shards` shards: sample i is an image filled with i % 256, label
    i % classes."""
    root.mkdir(parents=True)
    names = [f"class{c:04d}" for c in range(classes)]
    fields = {"image": Image((SIZE,)), "label": Label(tuple(names))}
    specs = {array_name(s.field, s.size): s for n, f in fields.items() for s in f.arrays(n)}
    records = []
    for s in range(shards):
        index = np.arange(s * per_shard, (s + 1) * per_shard)
        data = {
            f"image_{SIZE}": np.broadcast_to(
                (index % 256).astype(np.uint8)[:, None, None, None], (per_shard, SIZE, SIZE, 3)
            ),
            "label": (index % classes).astype(specs["label"].dtype),
        }
        saved = {name: _save(root, f"{name}-{s:05d}.npy", arr) for name, arr in data.items()}
        records.append(
            Shard(
                per_shard,
                {name: ref for name, (ref, _) in saved.items()},
                {ref.file: info for ref, info in saved.values()},
            )
        )
    described = {n: f.describe() for n, f in fields.items()}
    manifest = Manifest("npy", specs, records, fields=described)
    (root / MANIFEST).write_text(manifest.to_json())
    return root


def write_tokens(root: Path, shards: int, docs: int = 3, length: int = 40) -> Path:
    """A token dataset of `shards` train shards of `docs` documents of `length` tokens."""
    root.mkdir(parents=True)
    field = Tokens(256)
    specs = {"tokens": field.arrays("tokens")[0]}
    records = []
    for s in range(shards):
        tokens = (np.arange(docs * length) + s) % 256
        offsets = np.arange(0, docs * length + 1, length, dtype=np.int64)
        data, data_info = _save(root, f"tokens-train-{s:05d}.npy", tokens.astype(np.uint8))
        off, off_info = _save(root, f"tokens-offsets-train-{s:05d}.npy", offsets)
        data.offsets = off
        files = {data.file: data_info, off.file: off_info}
        records.append(Shard(docs, {"tokens": data}, files, split="train"))
    described = {"tokens": field.describe()}
    (root / MANIFEST).write_text(Manifest("npy", specs, records, fields=described).to_json())
    return root


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """5,000 shards of 2 samples, 1,000 classes."""
    return write_images(tmp_path_factory.mktemp("many") / "ds", shards=5000, classes=1000)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---------------------------------------------------------------- file descriptors

EPOCH = """
import os, resource, sys
import torch
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from loaders import ImageShardDataset, make_loader
from loaders.read.loader import Batch

class Counting(ImageShardDataset):
    def __getitems__(self, indices):
        fds = torch.full((len(indices),), len(os.listdir("/proc/self/fd")))
        return Batch((*super().__getitems__(indices).tensors, fds))

ds = Counting(sys.argv[1])
loader = make_loader(ds, batch_size=64, shuffle=True, num_workers=int(sys.argv[2]))
n = total = pixels = peak = 0
for images, labels, fds in loader:
    n, total, peak = n + len(labels), total + int(labels.sum()), max(peak, int(fds.max()))
    pixels += int(images[:, 0, 0, 0].sum())
print(n, total, pixels, peak)
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_epoch_of_5000_shards_under_256_open_files(many: Path, workers: int) -> None:
    """Every map used to keep a file descriptor until the process ended: 10,000 arrays ran
    out of a 1,024 (here 256) descriptor limit midway through the first epoch."""
    run = subprocess.run(
        [sys.executable, "-c", EPOCH, str(many), str(workers)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    n, total, pixels, peak = map(int, run.stdout.split())
    assert n == 10_000 and total == sum(i % 1000 for i in range(10_000))
    assert pixels == sum(i % 256 for i in range(10_000))
    assert peak < 256
    print(f"workers={workers}: at most {peak} open files while reading a batch")


def test_open_maps_are_bounded(many: Path) -> None:
    ds = ImageShardDataset(many, max_open=8)
    before = open_fds()
    for start in range(0, 2000, 50):  # 1,000 shards
        ds.__getitems__(list(range(start, start + 50)))
    assert len(ds.store._maps) <= 8
    assert open_fds() - before <= 8


def test_images_come_out_of_their_own_shard(many: Path) -> None:
    ds = ImageShardDataset(many, max_open=2)  # every batch evicts maps it opened itself
    idx = [9999, 0, 5001, 3, 7777, 2]
    images, labels = ds.__getitems__(idx).tensors
    assert labels.tolist() == [i % 1000 for i in idx]
    assert images[:, 0, 0, 0].tolist() == [i % 256 for i in idx]


# ---------------------------------------------------------------- pickles


@pytest.fixture(scope="module")
def forty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 shards, 20 classes: the README's example."""
    return write_images(tmp_path_factory.mktemp("forty") / "ds", shards=40, classes=20)


def pickled_sizes(ds: Any) -> tuple[int, int]:
    """The dataset's pickle with pickle and with torch's ForkingPickler (spawn workers)."""
    return len(pickle.dumps(ds)), len(ForkingPickler.dumps(ds))


@pytest.mark.parametrize("name", ["forty", "many"])
def test_image_dataset_pickles_under_1kb(name: str, request: pytest.FixtureRequest) -> None:
    root: Path = request.getfixturevalue(name)
    ds = ImageShardDataset(root)
    ds[3]  # opens memory maps, which must not travel
    plain, forking = pickled_sizes(ds)
    print(f"{name}: pickle {plain} B, ForkingPickler {forking} B")
    assert plain < 1024 and forking < 1024
    copy = pickle.loads(pickle.dumps(ds))
    assert torch.equal(copy[len(ds) - 1][0], ds[len(ds) - 1][0]) and copy.classes == ds.classes


def test_token_dataset_pickles_under_1kb(tmp_path: Path) -> None:
    root = write_tokens(tmp_path / "tok", shards=500)
    ds = TokenWindowDataset(root, block_size=16)
    ds[0]
    plain, forking = pickled_sizes(ds)
    print(f"tokens, 500 shards: pickle {plain} B, ForkingPickler {forking} B")
    assert plain < 1024 and forking < 1024
    copy = pickle.loads(pickle.dumps(ds))
    assert len(copy) == len(ds) and torch.equal(copy[len(ds) - 1][0], ds[len(ds) - 1][0])


# ---------------------------------------------------------------- repacks


@pytest.mark.parametrize("workers", [0, 2])
def test_overwrite_repack_raises_at_the_next_batch(
    raw_demo: Path, tmp_path: Path, pack_to: Any, workers: int
) -> None:
    """A repack with the same shapes used to mix old and new samples silently."""
    src, root = raw_demo / "images", tmp_path / "ds"
    pack_to(src, root, sizes=[16], shard_size=8)
    ds = ImageShardDataset(root, fields=("image", "label"))
    old = ds.__getitems__(list(range(len(ds)))).tensors[0].clone()
    loader = make_loader(ds, batch_size=4, num_workers=workers)  # persistent workers
    epoch = iter(loader)
    seen = [next(epoch)[0]]
    pack_to(src, root, sizes=[16], shard_size=8, overwrite=True, shuffle_seed=1)
    assert not torch.equal(ImageShardDataset(root).__getitems__(range(24)).tensors[0], old)
    with pytest.raises(FormatError, match="changed since the dataset was opened"):
        for batch in itertools.chain(epoch, loader):  # the rest of this epoch, then the next
            seen.append(batch[0])
    images = torch.cat(seen)
    assert len(images) < 2 * len(ds)
    assert torch.equal(images, old[: len(images)])  # old samples only, up to the error
    del epoch, loader


def test_the_manifest_hashed_is_the_one_parsed(
    packed: Path, copy_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repack between reading the manifest and hashing it used to go unnoticed: the hash was
    of a second read, the new file."""
    root = copy_dataset(packed)
    parse = Manifest.from_dict.__func__  # type: ignore[attr-defined]

    def parse_then_repack(cls: type[Manifest], d: dict[str, Any], *rest: Any) -> Manifest:
        manifest = parse(cls, d, *rest)
        monkeypatch.undo()
        edit_manifest(root, lambda m: m["shards"].reverse())  # same files, another order
        return manifest

    monkeypatch.setattr(Manifest, "from_dict", classmethod(parse_then_repack))
    ds = ImageShardDataset(root, size=64, fields=("label",))
    clone = pickle.loads(pickle.dumps(ds))  # a spawned worker
    with pytest.raises(FormatError, match="changed since"):
        clone[0]
    with pytest.raises(FormatError, match="changed since"):
        ds[0]


def test_token_datasets_refuse_a_changed_manifest(tmp_path: Path) -> None:
    root = write_tokens(tmp_path / "tok", shards=3)
    ds = TokenWindowDataset(root, block_size=16)
    ds[0]
    d = json.loads((root / MANIFEST).read_text())
    d["shards"].reverse()
    (root / MANIFEST).write_text(json.dumps(d))
    with pytest.raises(FormatError, match=r"manifest\.json changed since .*HINT"):
        ds[1]


def test_a_touched_but_equal_manifest_is_fine(forty: Path) -> None:
    ds = ImageShardDataset(forty)
    ds[0]
    os.utime(forty / MANIFEST, ns=(0, 0))  # the stat changes, the bytes do not
    assert int(ds[1][1]) == 1
