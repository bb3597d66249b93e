"""Fuzzing the parsers `prep import` runs on a source someone else made (issue 34): COCO JSON
and its segmentations, caption-list rows, Hugging Face state.json, dataset_dict.json and
features, WebDataset tar headers, members and shard patterns. Seeded mutations of valid inputs
(tests/fuzzing.py); each entry point may refuse only in its own way (a PrepError or UsageError
line, a Reject of the input, Unsupported naming a column), any other exception is a failure,
its input saved in the test's tmp_path (and its repr shown).

`make test` runs each target for FUZZ_SECONDS (default 1.5 s); `make fuzz` for 300 s, with
FUZZ_SEED to start elsewhere."""

from __future__ import annotations

import contextlib
import io
import json
import random
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzzing import fuzz, mutate, mutate_tree

from prep.run.errors import PrepError, Reject, UsageError

JsonTree = dict[str, Any]


def from_tree_or_bytes(trees: list[JsonTree], rng: random.Random) -> bytes:
    """A seed's JSON mutated as a tree (70%) or as bytes."""
    tree = rng.choice(trees)
    if rng.random() < 0.3:
        return mutate(json.dumps(tree).encode(), rng)
    return json.dumps(mutate_tree(tree, rng)).encode()


def test_mutate_tree_of_a_flat_dict_left_empty() -> None:
    """mutate_tree raised IndexError once every key of a flat dict was deleted."""
    rng = random.Random(3)
    assert all(isinstance(mutate_tree({"a": 1}, rng), dict) for _ in range(500))


# ---------------------------------------------------------------- COCO


def _coco() -> JsonTree:
    """A small instances file: 2 images, boxes, a polygon, an RLE (list and COCO's string),
    keypoints, categories with keypoint names."""
    from prep.fields.rle import rle_encode

    mask = np.zeros((20, 30), np.uint8)
    mask[4:9, 5:12] = 1
    return {
        "images": [
            {"id": 1, "file_name": "a.png", "width": 30, "height": 20},
            {"id": 2, "file_name": "sub/b.png", "width": 16, "height": 16},
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [5, 4, 7, 5], "area": 35,
             "iscrowd": 0, "segmentation": [[5, 4, 12, 4, 12, 9, 5, 9]],
             "keypoints": [6, 5, 2, 0, 0, 0]},
            {"id": 2, "image_id": 1, "category_id": 2, "bbox": [0, 0, 30, 20], "iscrowd": 1,
             "segmentation": rle_encode(mask)},
            {"id": 3, "image_id": 2, "category_id": 1, "bbox": [1, 1, 2, 2],
             "segmentation": {"counts": [0, 256], "size": [16, 16]}},
        ],
        "categories": [
            {"id": 1, "name": "cat", "keypoints": ["nose", "tail"]},
            {"id": 2, "name": "dog", "supercategory": "animal"},
        ],
    }  # fmt: skip


def test_fuzz_coco_json(tmp_path: Path) -> None:
    """parse_coco and categories_of refuse with PrepError; coco_images never raises (a bad
    entry is its image's reject); rasterise refuses a segmentation with ValueError, TypeError
    or KeyError (the importer's bad_segmentation)."""
    from prep.fields.rle import rasterise
    from prep.kinds.importers.cocojson import categories_of, coco_images, parse_coco
    from prep.kinds.importers.config import CocoConfig

    # Frames past 4096 px are refused first (too_large): masks stay small.
    cfg = CocoConfig(images=str(tmp_path), keypoints=True, masks=True, max_pixels=4096**2)
    seed = _coco()

    def target(data: bytes) -> None:
        parsed = parse_coco(data, "coco.json")
        items, _, _ = coco_images(parsed, categories_of(parsed, "coco.json"), cfg)
        for item in items:
            for seg in item.value.get("segmentation", []):
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    rasterise(seg, item.value["hw"])

    assert fuzz(target, lambda rng: from_tree_or_bytes([seed], rng), tmp_path, (PrepError,)) > 50


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a vertex cast to garbage: a wrong mask
def test_fuzz_rasterise(tmp_path: Path) -> None:
    """Segmentations alone, mutated hard: polygons, RLE counts (lists and strings)."""
    from prep.fields.rle import rasterise

    seeds = [{"seg": a["segmentation"]} for a in _coco()["annotations"]]
    seeds.append({"seg": {"counts": "0a2;0", "size": [3, 4]}})

    def make(rng: random.Random) -> bytes:
        tree = rng.choice(seeds)
        for _ in range(rng.randint(1, 3)):
            tree = mutate_tree(tree, rng)
        return json.dumps(tree).encode()

    def target(data: bytes) -> None:
        seg = json.loads(data).get("seg", [])
        rasterise(seg, (20, 30))

    assert fuzz(target, make, tmp_path, (ValueError, TypeError, KeyError)) > 50


# ---------------------------------------------------------------- caption lists


def test_fuzz_pairs_rows(tmp_path: Path) -> None:
    """A .jsonl line read (load_json: PrepError) and made a pair (make_pair: Reject)."""
    from prep.kinds.importers.pairs import make_pair
    from prep.run.inputs import load_json

    rows = [
        {"path": "images/a.png", "caption": "a cat on a mat"},
        {"path": {"bytes": None, "path": "b.png"}, "caption": ""},
        {"path": "c.jpg", "caption": "é", "extra": [1, 2]},
    ]

    def target(data: bytes) -> None:
        row = load_json(data, "pairs.jsonl:1")
        if isinstance(row, dict):  # PairsKind refuses a row that is not an object first
            make_pair(row, "path", "caption", tokens=len(data) % 2 == 0, allow_empty=False)

    make = lambda rng: from_tree_or_bytes(rows, rng)  # noqa: E731
    assert fuzz(target, make, tmp_path, (PrepError, Reject)) > 50


# ---------------------------------------------------------------- Hugging Face


FEATURES: JsonTree = {
    "image": {"_type": "Image"},
    "label": {"_type": "ClassLabel", "names": ["cat", "dog"]},
    "text": {"_type": "Value", "dtype": "string"},
    "boxes": {"_type": "Sequence", "feature": {"_type": "Value", "dtype": "float32"}, "length": 4},
    "objects": {"bbox": {"_type": "Array2D", "shape": [None, 4], "dtype": "float32"},
                "id": [{"_type": "Value", "dtype": "int64"}]},
    "tags": {"_type": "List", "feature": {"_type": "Value", "dtype": "large_string"}},
}  # fmt: skip


def test_fuzz_hf_json(tmp_path: Path) -> None:
    """dataset_dict.json, state.json and a schema's `huggingface` metadata: dict_splits,
    state_files, meta_features and checked_features refuse with PrepError or UsageError;
    columns_of refuses a feature with Unsupported, naming its column."""
    from prep.kinds.importers.hffeatures import (
        Unsupported,
        checked_features,
        columns_of,
        dict_splits,
        meta_features,
        state_files,
    )
    from prep.run.inputs import load_json

    seeds = [
        {"splits": ["train", "validation"]},
        {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": "train",
         "_fingerprint": "abc"},
        {"info": {"features": FEATURES}},
        FEATURES,
    ]  # fmt: skip

    def target(data: bytes) -> None:
        found = load_json(data, "x.json")
        if not isinstance(found, dict):  # read_object refuses it first
            return
        dict_splits(found, "dataset_dict.json")
        state_files(found, "state.json")
        for features in (meta_features(data, "meta"), checked_features(found, "info.json")):
            with contextlib.suppress(Unsupported):
                columns_of(features or {}, None)

    make = lambda rng: from_tree_or_bytes(seeds, rng)  # noqa: E731
    assert fuzz(target, make, tmp_path, (PrepError, UsageError)) > 50


# ---------------------------------------------------------------- WebDataset


def _tar() -> bytes:
    """A tar of 3 samples with every member kind: jpg, cls, txt, json, npy, other."""
    from PIL import Image

    jpg = io.BytesIO()
    Image.new("RGB", (8, 6), (9, 99, 199)).save(jpg, "JPEG")
    npy = io.BytesIO()
    np.save(npy, np.arange(6, dtype=">i2").reshape(2, 3))
    members = {"jpg": jpg.getvalue(), "cls": b"1", "txt": b"a caption", "json": b'{"a": [1]}'}
    members |= {"npy": npy.getvalue(), "seg.png": b"\x89PNG", "bin": bytes(5)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key in ("dir/k0", "k1", "k2"):
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_fuzz_wds_tar(tmp_path: Path) -> None:
    """A mutated tar (headers most often) scanned: scan_tar never raises (a bad tar or member
    is a reject); each member's bytes taken by its field: value_of raises Reject only, and
    npy_header one of NPY_ERRORS."""
    from prep.kinds.importers.tars import NPY_ERRORS, npy_header, scan_tar
    from prep.kinds.importers.wds import KINDS, Declared, value_of

    seed = _tar()

    def make(rng: random.Random) -> bytes:
        data = mutate(seed, rng, focus=512 if rng.random() < 0.5 else None)
        return data if rng.random() < 0.8 else __import__("gzip").compress(data, mtime=0)

    def target(data: bytes) -> None:
        if data[:2] == b"\x1f\x8b":
            import gzip

            f: Any = gzip.GzipFile(fileobj=io.BytesIO(data))
        else:
            f = io.BytesIO(data)
        found = scan_tar(f, "x.tar", max_member=1 << 20)
        for key, members in found.samples:
            for ext, offset, size in members:
                f.seek(offset)
                member = f.read(size)
                with contextlib.suppress(Reject):
                    kind = KINDS.get(ext.rsplit(".", 1)[-1].lower(), "bytes")
                    value_of(Declared(key, ext, kind), member)
                with contextlib.suppress(*NPY_ERRORS):
                    npy_header(io.BytesIO(member))

    assert fuzz(target, make, tmp_path, ()) > 50


def test_fuzz_wds_patterns(tmp_path: Path) -> None:
    """Shard patterns: expand gives the shard names, or refuses with UsageError."""
    from prep.kinds.importers.tars import expand

    seeds = [b"s/train-{000000..000009}.tar", b"{a,b}-{1..2}/x.tar", b"plain.tar", b"{0..3}{}"]

    def target(data: bytes) -> None:
        expand(data.decode("utf-8", "replace"))

    make = lambda rng: mutate(rng.choice(seeds), rng)  # noqa: E731
    assert fuzz(target, make, tmp_path, (UsageError,)) > 50
