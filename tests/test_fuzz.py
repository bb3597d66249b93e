"""Fuzzing the parsers a dataset someone else made reaches (issue 23): `.npy` headers, `.h5`
shards, manifests, the shard index of format version 4 and JPEG samples (through
loaders._jpegroi where it is built). Seeded random
mutations of valid inputs, stdlib only; any exception but FormatError is a failure, and the
input that raised it is written to the test's tmp_path (and its repr shown).

`make test` runs each target for FUZZ_SECONDS (default 1.5 s); `make fuzz` for 300 s, with
FUZZ_SEED to start elsewhere."""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzzing import SEED, fuzz, mutate, mutate_tree
from hostile_base import manifest_of
from untrusted import images, tokens, volumes

from loaders.fields import Image, Volume
from loaders.fields.checks import check_files
from loaders.format import (
    MANIFEST,
    ArrayRef,
    ArraySpec,
    Manifest,
    check_array,
    local_resolver,
    map_layout,
    read_manifest,
)
from loaders.format.index import DIGESTS, SHARDS
from loaders.read.decode import Pixels, run
from loaders.read.store import Places

# ---------------------------------------------------------------- .npy headers


def _npy_seeds(folder: Path) -> list[tuple[bytes, ArrayRef, ArraySpec]]:
    """Valid .npy files as prep and numpy write them, with the ref and spec they satisfy."""
    seeds = []
    cases: list[tuple[np.ndarray, ArraySpec]] = [
        (np.zeros((3, 4, 4, 3), np.uint8), Image(sizes=(4,)).arrays("image")[0]),
        (np.arange(5, dtype=np.uint16), ArraySpec("tokens", None, "uint16", ())),
        (np.arange(4, dtype=np.int64), ArraySpec("tokens", None, "int64", ())),  # its offsets
        (np.ones((2, 3), np.uint32), Volume().arrays("image")[1]),  # image_shape
    ]
    for i, (arr, spec) in enumerate(cases):
        for version in ((1, 0), (2, 0)):
            path = folder / f"seed{i}-{version[0]}.npy"
            with open(path, "wb") as f:
                np.lib.format.write_array(f, arr, version=version, allow_pickle=False)
            seeds.append((path.read_bytes(), ArrayRef(path.name, len(arr)), spec))
    return seeds


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::SyntaxWarning")
def test_fuzz_npy_header(tmp_path: Path) -> None:
    seeds = _npy_seeds(tmp_path)
    path = tmp_path / "fuzzed.npy"
    current: dict[str, Any] = {}

    def make(rng: random.Random) -> bytes:
        data, ref, spec = rng.choice(seeds)
        current.update(ref=ref, spec=spec)
        return mutate(data, rng, focus=128)

    def target(data: bytes) -> None:
        path.write_bytes(data)
        arr = map_layout(path, check_array(path, current["ref"], current["spec"]))
        arr.sum()  # every byte the header claims is there to read

    tried = fuzz(target, make, tmp_path)
    assert tried > 50


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::SyntaxWarning")
def test_fuzz_check_array_headers(tmp_path: Path) -> None:
    """Headers made up whole: random dtypes, shapes and orders against one spec."""
    path = tmp_path / "made.npy"
    spec = Image(sizes=(2,)).arrays("image")[0]
    descrs = ["'|u1'", "'<u2'", "'|O'", "'<U3'", "[('a', '|u1')]", "'>u1'", "'|b1'", "1", "None"]
    dims = [0, 1, 2, 3, -1, 2**31, 2**32, 2**63, 2**64, "'x'", "1.5", "None", "()"]

    def make(rng: random.Random) -> bytes:
        shape = ", ".join(str(rng.choice(dims)) for _ in range(rng.randint(0, 5)))
        order = rng.choice(["False", "True", "0", "'x'"])
        text = f"{{'descr': {rng.choice(descrs)}, 'fortran_order': {order}, 'shape': ({shape},), }}"
        text = text.ljust(117) + "\n"
        head = b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode()
        return head + bytes(rng.choice([0, 12, 48, 4096]))

    def target(data: bytes) -> None:
        path.write_bytes(data)
        check_array(path, ArrayRef(path.name, 4), spec)

    assert fuzz(target, make, tmp_path) > 50


def test_fuzz_h5_shard(tmp_path: Path) -> None:
    """A mutated .h5 shard's arrays located, mapped and read (h5py raised RuntimeError for a
    structure pointing past the file's end)."""
    root = images(tmp_path / "h5", h5=True)
    manifest = read_manifest(root)
    seed = (root / "shard-00000.h5").read_bytes()
    path = tmp_path / "fuzzed.h5"

    def target(data: bytes) -> None:
        path.write_bytes(data)
        for name in ("image_8", "label"):
            ref, spec = manifest.ref(0, name)
            layout = check_array(path, ArrayRef(path.name, ref.length, ref.key), spec, name)
            map_layout(path, layout).sum()

    assert fuzz(target, lambda rng: mutate(seed, rng), tmp_path) > 50


# ---------------------------------------------------------------- manifests


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A small valid dataset of each kind and storage the format holds."""
    base = tmp_path_factory.mktemp("fuzz")
    return [
        images(base / "images"),
        images(base / "h5", h5=True),
        tokens(base / "tokens", [[1, 2, 0], [3, 0], [0]], eot_id=0),
        volumes(base / "volumes", [(1, 2, 2), (2, 1, 2)], [0, 4, 8], 8),
    ]


def test_fuzz_manifest(datasets: list[Path]) -> None:
    """Mutated manifests read and checked against their (valid) folders, as `prep verify`."""
    trees = {root: manifest_of(root) for root in datasets}  # tests/hostile_base.py's reader
    seeds = [(root, json.dumps(tree).encode()) for root, tree in trees.items()]
    where: dict[str, Path] = {}

    def make(rng: random.Random) -> bytes:
        root, data = rng.choice(seeds)
        where["root"] = root
        if rng.random() < 0.3:
            return mutate(data, rng)
        return json.dumps(mutate_tree(trees[root], rng)).encode()

    def target(data: bytes) -> None:
        root = where["root"]
        manifest = Manifest.from_json(data, root / MANIFEST)
        check_files(root, manifest, checksums=True)

    assert fuzz(target, make, datasets[0].parent) > 50


def test_fuzz_shard_index(tmp_path: Path) -> None:
    """Format version 4's shard index: shards.npy or sha256.npy mutated (the manifest's `index`
    entry giving their new byte size and sha256, so the mutation reaches the reader), or the
    manifest as written (its `index` entry) mutated, then read and checked as `prep verify`."""
    import prep
    from prep.fields import Array, Label, Text

    def sample(i: int) -> dict[str, Any]:
        return {"y": "ab"[i % 2], "t": "x" * i, "v": [i, -i]}

    fields = {"y": Label(("a", "b")), "t": Text(), "v": Array("float32", (2,))}
    src = tmp_path / "packed"
    prep.pack_samples(sample, list(range(5)), src, fields, jobs=1, shard_size=2)
    root = shutil.copytree(src, tmp_path / "work")
    written = json.loads((src / MANIFEST).read_text())
    seeds = {name: (src / name).read_bytes() for name in (SHARDS, DIGESTS, MANIFEST)}
    current: dict[str, str] = {}

    def make(rng: random.Random) -> bytes:
        name = current["name"] = rng.choice(sorted(seeds))
        if name == MANIFEST and rng.random() < 0.7:
            return json.dumps(mutate_tree(written, rng)).encode()
        return mutate(seeds[name], rng, focus=None if name == MANIFEST else 160)

    def target(data: bytes) -> None:
        files = dict(seeds) | {current["name"]: data}
        if current["name"] != MANIFEST:
            info = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            m = json.loads(seeds[MANIFEST])
            m["index"]["files"][current["name"]] = info
            files[MANIFEST] = json.dumps(m).encode()
        for name, content in files.items():
            (root / name).write_bytes(content)
        manifest = Manifest.from_json(files[MANIFEST], root / MANIFEST, local_resolver(root))
        check_files(root, manifest, checksums=True)
        manifest.split_of(), [s.files for s in manifest.shards]

    assert fuzz(target, make, tmp_path) > 50


# ---------------------------------------------------------------- JPEG samples


def _jpegs() -> list[tuple[bytes, tuple[int, int], int]]:
    """Small JPEGs (bytes, (h, w), channels): colour and grey, baseline and progressive, with
    restart markers, odd sizes."""
    from PIL import Image

    rng = np.random.default_rng(SEED)
    out = []
    for h, w, mode, options in [
        (16, 16, "RGB", {}),
        (33, 47, "RGB", {"progressive": True}),
        (24, 40, "L", {}),
        (64, 48, "RGB", {"subsampling": 0, "restart_marker_blocks": 1}),
    ]:
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).convert(mode).save(buf, "JPEG", quality=80, **options)
        out.append((buf.getvalue(), (h, w), 1 if mode == "L" else 3))
    return out


def test_fuzz_jpeg_samples(tmp_path: Path) -> None:
    """Mutated JPEG bytes decoded as a batch row is, to random boxes and output sizes (the
    C extension decodes boxes where it is built)."""
    seeds = _jpegs()
    places = Places({0: "fuzzed.jpg"}, np.zeros(1, np.int64), np.zeros(1, np.int64))
    job: dict[str, Any] = {}

    def make(rng: random.Random) -> bytes:
        data, (h, w), channels = rng.choice(seeds)
        top, left = rng.randrange(h), rng.randrange(w)
        box = (top, left, rng.randint(1, h - top), rng.randint(1, w - left))
        out_hw = rng.choice([(box[2], box[3]), (4, 4), (max(1, box[2] // 3), box[3])])
        job.update(hw=(h, w), box=box, dst=np.empty((*out_hw, channels), np.uint8))
        return mutate(data, rng)

    def target(data: bytes) -> None:
        src = np.frombuffer(data, np.uint8)
        pixels = Pixels([src], places, True, np.array([job["hw"]]), np.array([job["box"]]))
        run(job["dst"][None], pixels, False, False, [0])

    assert fuzz(target, make, tmp_path) > 50
