"""The shard index of format version 4 (loaders.format.schema): each shard's record in two .npy
files beside a small manifest, read a row at a time; file names derived from the split and the
task; a lying index refused in one line."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from loaders import FormatError, ImageShardDataset
from loaders.format import MANIFEST, read_manifest
from loaders.format.index import DIGESTS, SHARDS, file_name, stem


def test_the_manifest_holds_no_shard_records(packed: Path) -> None:
    d = json.loads((packed / MANIFEST).read_text())
    assert "shards" not in d and d["index"]["shards"] == 3
    assert set(d["index"]["files"]) == {SHARDS, DIGESTS}
    m = read_manifest(packed)
    files = {p.name for p in packed.iterdir()}
    assert files == {f for s in m.shards for f in s.files} | {
        SHARDS,
        DIGESTS,
        MANIFEST,
        "rejects.jsonl",
        "inputs.json",  # what a later --append needs (issue 37)
        "README.md",  # the dataset card (issue 37)
    }
    assert m.counts().tolist() == [8, 8, 8] and m.num_samples == 24


def test_names_are_derived_from_split_and_task() -> None:
    assert stem(None, 7) == "00007" and stem("val", 12) == "val-00012"
    assert file_name("image_64", "val-00012", "npy") == "image_64-val-00012.npy"
    assert file_name("source.offsets", "00007", "npy") == "source-offsets-00007.npy"
    assert file_name("label", "00007", "h5") == "shard-00007.h5"


def test_records_read_back_equal_to_the_files(packed: Path) -> None:
    m = read_manifest(packed)
    for s in m.shards:
        for name, info in s.files.items():
            assert (packed / name).stat().st_size == info.bytes
        assert s.arrays["label"].length == s.count == 8
        assert s.arrays["source"].offsets is not None


@pytest.mark.parametrize(
    ("lie", "message"),
    [
        (lambda t, d: t.__setitem__((0, 1), -3), "out of range"),
        (lambda t, d: t.__setitem__((1, 0), 5), "out of range"),  # a split that is not listed
        (lambda t, d: t.__setitem__((3, 2), -1), "negative"),  # an array's length
    ],
)
def test_a_lying_index_is_one_line(packed: Path, tmp_path: Path, lie, message: str) -> None:
    root = tmp_path / "ds"
    shutil.copytree(packed, root)
    table, digests = np.load(root / SHARDS), np.load(root / DIGESTS)
    lie(table, digests)
    _rewrite(root, table, digests)
    with pytest.raises(FormatError, match=message):
        ImageShardDataset(root, size=64)[7]


def test_index_files_are_checked_against_the_manifest(packed: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(packed, root)
    table = np.load(root / SHARDS)
    np.save(root / SHARDS, table[:, :2])  # a shard fewer: its byte size and shape say so
    with pytest.raises(FormatError, match=r"shards\.npy"):
        ImageShardDataset(root, size=64)
    (root / SHARDS).unlink()
    (root / SHARDS).symlink_to("/etc/passwd")
    with pytest.raises(FormatError, match=r"shards\.npy"):
        ImageShardDataset(root, size=64)


def test_a_dataset_of_many_shards_opens_without_reading_them(tmp_path: Path) -> None:
    """Past loaders.read.store.EAGER_SHARDS a store checks a shard when it first reads it: a
    dataset of 5,000 shards, with the files of one only, opens and reads that one."""
    from loaders.read.store import EAGER_SHARDS

    root = synthetic(tmp_path / "ds", shards=EAGER_SHARDS + 904, count=3)
    ds = ImageShardDataset(root, size=8)
    assert len(ds) == 3 * 5000 and len(pickle.dumps(ds)) < 2048
    image, label = ds[5]  # shard 1's second sample: written below
    assert image.shape == (3, 8, 8) and int(label) == 1 and int(image.float().mean()) == 5
    with pytest.raises(FormatError, match=r"image_8-00002\.npy is missing"):
        ds[6]


def synthetic(root: Path, shards: int, count: int) -> Path:
    """A dataset of `shards` shards of `count` 8 px images (shard i's labels i % 4) whose files
    exist for shard 1 alone: the records of the others lie, as a bench's would."""
    from loaders.fields import Image, Label
    from loaders.format.index import columns, parts
    from prep.run.shardwriter import ShardFiles, writing

    root.mkdir(parents=True)
    fields = {"image": Image((8,)), "label": Label(("a", "b", "c", "d"))}
    arrays = {
        "image_8": fields["image"].arrays("image")[0],
        "label": fields["label"].arrays("label")[0],
    }
    out = ShardFiles(root, stem(None, 1))
    with writing([out]):
        out.open_all(arrays)
        for k in range(count):
            out.append(
                {"image_8": np.full((8, 8, 3), (3 + k) % 256, np.uint8), "label": np.uint8(1)}
            )
    one = out.publish(count)
    cols = columns(arrays, "npy")
    table = np.zeros((len(cols), shards), np.int64)
    table[cols.index("count")] = count
    table[cols.index("split")] = -1
    table[cols.index("task")] = np.arange(shards)
    table[cols.index("length:image_8")] = count
    table[cols.index("length:label")] = count
    names = [file_name(p, stem(None, 1), "npy") for p in parts(arrays, "npy")]
    digests = np.zeros((shards, len(names), 32), np.uint8)
    for j, (p, name) in enumerate(zip(parts(arrays, "npy"), names, strict=True)):
        table[cols.index(f"bytes:{p}")] = one.files[name].bytes
        digests[:, j] = np.frombuffer(bytes.fromhex(one.files[name].sha256), np.uint8)
    manifest = {
        "format": "prep",
        "format_version": 4,
        "command": "pack",
        "storage": "npy",
        "fields": {n: f.describe() for n, f in fields.items()},
        "arrays": {n: s.stored() for n, s in arrays.items()},
        "num_samples": shards * count,
        "splits": [],
    }
    _rewrite(root, table, digests, manifest)
    return root


def _rewrite(root: Path, table: np.ndarray, digests: np.ndarray, d: dict | None = None) -> None:
    """The index files written again, and the manifest's record of them with them."""
    import hashlib

    d = d if d is not None else json.loads((root / MANIFEST).read_text())
    files = {}
    for name, arr in ((SHARDS, table), (DIGESTS, digests)):
        np.save(root / name, arr, allow_pickle=False)
        data = (root / name).read_bytes()
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    from loaders.format.index import columns
    from loaders.format.spec import array_spec

    arrays = {n: array_spec(n, v) for n, v in d["arrays"].items()}
    d["index"] = {
        "shards": table.shape[1],
        "columns": columns(arrays, d["storage"]),
        "files": files,
    }
    (root / MANIFEST).write_text(json.dumps(d))
