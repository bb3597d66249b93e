"""Loading refuses garbage: each check of the manifest against the files, one test each, and
every message names the shard and the file or array at fault.

Tampering happens on a copy of a packed dataset (the session's `packed` fixture: sizes 64 and 96,
masks, 3 shards of 8)."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from helpers import no_hang
from manifests import edit_manifest

from loaders import ImageShardDataset, make_loader
from loaders.fields.checks import check_files, load_manifest
from loaders.format import FormatError, read_manifest

Edit = Callable[[dict[str, Any]], None]


def set_bytes(root: Path, shard: int, name: str) -> None:
    """Make the manifest agree with the file's new size, as a careful tamperer would."""
    size = (root / name).stat().st_size

    def change(d: dict[str, Any]) -> None:
        d["shards"][shard]["files"][name]["bytes"] = size

    edit_manifest(root, change)


def refused(root: Path, *parts: str) -> str:
    """Opening the dataset raises FormatError whose message holds every part."""
    with pytest.raises(FormatError) as info:
        ImageShardDataset(root, size=64)
    message = str(info.value)
    for part in parts:
        assert part in message, (part, message)
    return message


@pytest.fixture
def ds(packed: Path, copy_dataset: Callable[[Path], Path]) -> Path:
    return copy_dataset(packed)


# ---------------------------------------------------------------- the manifest itself


def test_unknown_format_version(ds: Path) -> None:
    edit_manifest(ds, lambda d: d.update(format_version=3))
    refused(ds, "format version 3 is not one of [1, 2]", "HINT")


@pytest.mark.parametrize(
    "text",
    ["[1, 2]", '{"format": "prep", "format_version": 1}', "{not json", '{"format": "other"}'],
    ids=["list", "no-keys", "syntax", "not-prep"],
)
def test_malformed_manifest(ds: Path, text: str) -> None:
    (ds / "manifest.json").write_text(text)
    refused(ds, "manifest.json")


def test_missing_manifest_says_how_to_finish(ds: Path) -> None:
    (ds / "manifest.json").unlink()
    refused(ds, "has no manifest.json", "HINT: pack it")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["arrays"]["label"].update(dtype="object"), "array label: dtype 'object'"),
        (lambda d: d["arrays"]["label"].update(dtype="no-such"), "array label: dtype 'no-such'"),
        (lambda d: d["arrays"]["image_64"].update(shape=[64, "x", 3]), "array image_64: shape"),
        (lambda d: d["shards"][1].update(count=-8), "shard 1: count -8"),
        (lambda d: d["shards"][2]["arrays"]["label"].update(length="8"), "shard 2: array label"),
        (lambda d: d.update(num_samples=25), "says 25 samples but its shards hold 24"),
        (
            lambda d: d["fields"]["label"].update(classes="abcd"),
            "classes abcd is not a list of names",
        ),
    ],
    ids=[
        "object-dtype",
        "bad-dtype",
        "bad-shape",
        "negative-count",
        "bad-length",
        "total",
        "classes",
    ],
)
def test_manifest_values_are_checked(ds: Path, change: Edit, message: str) -> None:
    edit_manifest(ds, change)
    refused(ds, message)


# ---------------------------------------------------------------- the manifest against the files


def test_missing_file(ds: Path) -> None:
    (ds / "image_64-00001.npy").unlink()
    refused(ds, "shard 1:", "image_64-00001.npy is missing")


def test_byte_size(ds: Path) -> None:
    with open(ds / "mask_96-00002.npy", "ab") as f:
        f.write(b"\0")
    refused(ds, "shard 2:", "mask_96-00002.npy is 73857 bytes, manifest says 73856")


def test_dtype_and_shape_against_the_header(ds: Path) -> None:
    edit_manifest(ds, lambda d: d["arrays"]["label"].update(dtype="uint16"))
    refused(ds, "shard 0:", "array label is uint8(8,), manifest says uint16(8,)")
    edit_manifest(ds, lambda d: d["arrays"]["label"].update(dtype="uint8"))
    edit_manifest(ds, lambda d: d["arrays"]["image_64"].update(shape=[64, 64, 1]))
    refused(
        ds, "shard 0:", "array image_64 is uint8(8, 64, 64, 3), manifest says uint8(8, 64, 64, 1)"
    )


def test_dtype_and_shape_must_be_the_fields(ds: Path) -> None:
    """The field registry: image arrays are uint8 (S, S, 1 or 3), whatever the files say."""
    edit_manifest(ds, lambda d: d["arrays"]["image_64"].update(dtype="float64"))
    refused(ds, "array image_64: dtype float64 is not one of ('uint8',)")
    edit_manifest(ds, lambda d: d["arrays"]["image_64"].update(dtype="uint8", shape=[64, 64, 4]))
    refused(ds, "array image_64: shape [64, 64, 4] is not image's at size 64")


def test_labels_are_checked_against_classes(ds: Path) -> None:
    path = ds / "label-00001.npy"
    assert np.load(path).dtype == np.uint8 and len(read_manifest(ds).classes or []) == 4
    with open(path, "r+b") as f:  # the size on disk stays the same
        f.seek(128 + 3)  # prep's fixed .npy header, then sample 3
        f.write(bytes([4]))
    refused(ds, "shard 1:", "label-00001.npy", "label 4 of label is not one of its classes")


def test_counts(ds: Path) -> None:
    def shorter(d: dict[str, Any]) -> None:
        d["shards"][1]["count"] = 7
        d["num_samples"] = 23

    edit_manifest(ds, shorter)
    refused(ds, "shard 1: array image_64 has 8 samples, the shard 7")


def test_declared_array_without_a_file(ds: Path) -> None:
    edit_manifest(ds, lambda d: d["shards"][2]["arrays"].pop("mask_64"))
    refused(ds, "shard 2: array mask_64 is declared in the manifest but has no file")


def test_array_file_must_be_listed(ds: Path) -> None:
    edit_manifest(ds, lambda d: d["shards"][0]["files"].pop("label-00000.npy"))
    refused(ds, "shard 0: array label is in label-00000.npy, not among its files")


def test_truncated_data_with_a_matching_size(ds: Path) -> None:
    path = ds / "image_96-00001.npy"
    path.write_bytes(path.read_bytes()[:-1000])
    set_bytes(ds, 1, path.name)
    refused(ds, "array image_96 needs 221312 bytes, the file has 220312", "truncated")


def test_verify_checks_sha256(ds: Path) -> None:
    path = ds / "label-00002.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    manifest = load_manifest(ds)  # opening checks sizes and headers, not every byte
    problems = check_files(ds, manifest, checksums=True)  # `prep verify`
    assert problems == [f"shard 2: {path} checksum differs from the manifest"]


# ---------------------------------------------------------------- paths out of the folder


@pytest.mark.parametrize("bad", ["../image_64-00000.npy", "/etc/passwd", "a/../../x.npy", ""])
def test_paths_that_escape(ds: Path, bad: str) -> None:
    def escape(d: dict[str, Any]) -> None:
        shard = d["shards"][0]
        shard["files"][bad] = shard["files"].pop("image_64-00000.npy")
        shard["arrays"]["image_64"]["file"] = bad

    edit_manifest(ds, escape)
    refused(ds, "shard 0:", repr(bad))


def test_link_out_of_the_folder(ds: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.npy"
    os.replace(ds / "label-00001.npy", outside)
    os.symlink(outside, ds / "label-00001.npy")
    refused(ds, "shard 1:", "links outside the dataset folder")
    os.unlink(ds / "label-00001.npy")
    os.symlink("label-00001.npy", ds / "label-00001.npy")  # a loop
    refused(ds, "shard 1:", "label-00001.npy")


def test_special_file_in_place_of_a_shard(ds: Path) -> None:
    (ds / "label-00001.npy").unlink()
    os.mkfifo(ds / "label-00001.npy")
    with no_hang():
        refused(ds, "shard 1:", "label-00001.npy is not a regular file")


# ---------------------------------------------------------------- never unpickle


def test_object_npy_is_refused(ds: Path) -> None:
    path = ds / "label-00000.npy"
    np.save(path, np.array([{"a": 1}] * 8, dtype=object), allow_pickle=True)
    set_bytes(ds, 0, path.name)
    refused(ds, "shard 0:", "array label holds Python objects")


def test_pickle_named_npy_is_refused(ds: Path) -> None:
    path = ds / "label-00000.npy"
    path.write_bytes(pickle.dumps(np.zeros(8, np.uint8)))
    set_bytes(ds, 0, path.name)
    refused(ds, "shard 0:", "cannot read array label")


class Unpickled(Exception):
    pass


def _no_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any unpickling fail loudly (numpy's allow_pickle=True path calls pickle.load)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise Unpickled("the reader unpickled")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)


def test_never_unpickles(ds: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full read of every array, then an object-dtype file, with unpickling made to fail."""
    _no_unpickling(monkeypatch)
    fields = ("image", "mask", "label", "orig_size")
    data = ImageShardDataset(ds, size=64, fields=fields)
    for size in (64, 96):
        data.set_size(size)
        assert [len(t) for t in data.__getitems__(range(len(data))).tensors] == [24] * 4
    path = ds / "label-00000.npy"
    np.save(path, np.array([{"a": 1}] * 8, dtype=object), allow_pickle=True)
    set_bytes(ds, 0, path.name)
    refused(ds, "shard 0:", "array label holds Python objects")


# ---------------------------------------------------------------- h5 datasets


@pytest.fixture(scope="module")
def packed_h5(raw_demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from prep.kinds.images.config import PackConfig
    from prep.kinds.images.pack import pack

    out = tmp_path_factory.mktemp("h5") / "ds"
    pack(
        PackConfig(
            str(raw_demo / "images"), str(out), sizes=[32], shard_size=8, format="h5", jobs=1
        ),
        show_progress=False,
    )
    return out


def _rewrite_h5(path: Path, key: str, **options: Any) -> None:
    with h5py.File(path, "a") as f:
        data = f[key][()]
        del f[key]
        f.create_dataset(key, data=data, **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"chunks": True, "compression": "gzip"}, "is chunked or compressed")],
)
def test_h5_compressed_refused(
    packed_h5: Path, copy_dataset: Any, options: dict[str, Any], message: str
) -> None:
    ds = copy_dataset(packed_h5)
    _rewrite_h5(ds / "shard-00001.h5", "image_32", **options)
    set_bytes(ds, 1, "shard-00001.h5")
    with pytest.raises(FormatError, match=f"shard 1: .*shard-00001.h5:image_32 {message}"):
        ImageShardDataset(ds)


def test_h5_strings_refused(
    packed_h5: Path, copy_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = copy_dataset(packed_h5)
    _no_unpickling(monkeypatch)
    assert len(ImageShardDataset(ds).__getitems__(range(24)).tensors[0]) == 24
    path = ds / "shard-00002.h5"
    with h5py.File(path, "a") as f:
        del f["label"]
        f.create_dataset("label", data=np.array([b"x"] * 8, dtype=h5py.string_dtype()))
    set_bytes(ds, 2, path.name)
    with pytest.raises(FormatError, match=r"shard 2: .*shard-00002\.h5:label holds Python objects"):
        ImageShardDataset(ds)


def test_h5_checks_like_npy(packed_h5: Path, copy_dataset: Any) -> None:
    ds = copy_dataset(packed_h5)
    assert len(ImageShardDataset(ds)) == 24
    edit_manifest(ds, lambda d: d["arrays"]["label"].update(dtype="uint16"))
    with pytest.raises(
        FormatError, match=r"shard 0: .*array label is uint8\(8,\), manifest says uint16"
    ):
        ImageShardDataset(ds)
    edit_manifest(ds, lambda d: d["arrays"]["label"].update(dtype="uint8"))
    edit_manifest(ds, lambda d: d["arrays"]["orig_size"].update(dtype="uint16"))
    with pytest.raises(FormatError, match=r"array orig_size: dtype uint16 is not one of"):
        ImageShardDataset(ds)  # the field registry: orig_size is stored as uint32
    edit_manifest(ds, lambda d: d["arrays"]["orig_size"].update(dtype="uint32"))
    (ds / "shard-00002.h5").unlink()
    with pytest.raises(FormatError, match=r"shard 2: .*shard-00002\.h5 is missing"):
        ImageShardDataset(ds)


# ---------------------------------------------------------------- indices and workers


def test_out_of_range_indices(packed: Path) -> None:
    ds = ImageShardDataset(packed, size=64, fields=("image", "label"))
    n = len(ds)
    assert n == 24
    assert torch.equal(ds[-1][0], ds[n - 1][0]) and torch.equal(ds[np.int64(5)][0], ds[5][0])
    for bad in (n, -n - 1, 10**12):
        with pytest.raises(IndexError, match=f"index {bad} out of range for a dataset of 24"):
            ds[bad]
    with pytest.raises(IndexError):
        ds.__getitems__([0, 3, n])
    assert len(list(ds)) == n  # iteration stops at the first IndexError


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_give_the_same_samples(packed: Path, context: str) -> None:
    ds = ImageShardDataset(packed, size=96, fields=("image", "label", "mask", "orig_size"))
    ref = ds.__getitems__(list(range(len(ds)))).tensors
    workers = 2 if context == "fork" else 1  # a spawned worker imports torch: seconds each
    loader = make_loader(ds, batch_size=5, num_workers=workers, multiprocessing_context=context)
    batches = list(loader)
    for j, expected in enumerate(ref):
        assert torch.equal(torch.cat([b[j] for b in batches]), expected)
    single = make_loader(ds, batch_size=5, num_workers=0)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(single, batches, strict=True))


def test_pickled_copy_reads_the_same_samples(packed: Path) -> None:
    """A worker's copy carries no memory map and reads the manifest again: same samples."""
    ds = ImageShardDataset(packed, size=64)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.store._manifest is None and torch.equal(copy[17][0], ds[17][0])
    assert read_manifest(packed).num_samples == len(copy)
