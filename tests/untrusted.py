"""Datasets that lie, for the tests of issue 23 (test_untrusted_*, test_fuzz): written directly
with numpy, h5py and the `loaders.format` types, so that each test holds exactly the lie it is
about (imported as `untrusted`: tests/ is on sys.path)."""

from __future__ import annotations

import hashlib
import shutil
import struct
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from manifests import edit_manifest

from loaders.format import MANIFEST, ArrayRef, ArraySpec, FileInfo, Manifest, Shard
from loaders.format.legacy.arrays import FIELDS

Arrays = dict[str, np.ndarray]


def digest(path: Path) -> FileInfo:
    return FileInfo(path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())


def write_dataset(
    root: Path,
    kind: str,
    specs: dict[str, ArraySpec],
    shards: list[tuple[int, Arrays]],
    *,
    h5: bool = False,
    split: str | None = None,
    **fields: Any,
) -> Path:
    """A dataset of `kind` whose shard s holds shards[s] = (count, {array name: data}), one
    .npy file an array, or one .h5 file a shard; `fields`: the Manifest's classes= or extra=."""
    root.mkdir(parents=True, exist_ok=True)
    records = []
    for s, (count, arrays) in enumerate(shards):
        refs, files = {}, {}
        if h5:
            rel = f"shard-{s:05d}.h5"
            with h5py.File(root / rel, "w") as f:
                for name, data in arrays.items():
                    f.create_dataset(name, data=data)
                    refs[name] = ArrayRef(rel, len(data), name)
            files[rel] = digest(root / rel)
        else:
            for name, data in arrays.items():
                rel = f"{name}-{s:05d}.npy"
                np.save(root / rel, data, allow_pickle=False)
                refs[name], files[rel] = ArrayRef(rel, len(data)), digest(root / rel)
        records.append(Shard(count, refs, files, split=split))
    manifest = Manifest(kind, "h5" if h5 else "npy", specs, records, **fields)
    (root / MANIFEST).write_text(manifest.to_json())
    return root


def images(root: Path, n: int = 6, classes: int = 3, h5: bool = False) -> Path:
    """n 8 px images in one shard, labels i % classes."""
    specs = {"image_8": FIELDS["image"].spec(8), "label": FIELDS["label"].spec(None)}
    data = {
        "image_8": np.full((n, 8, 8, 3), 7, np.uint8),
        "label": (np.arange(n) % classes).astype(specs["label"].dtype),
    }
    names = [f"c{i}" for i in range(classes)]
    return write_dataset(root, "images", specs, [(n, data)], h5=h5, classes=names)


def tokens(
    root: Path, docs: list[list[int]], vocab_size: int = 256, eot_id: int | None = None
) -> Path:
    """One train shard holding `docs` (each already ending with eot_id when it has one)."""
    dtype = "uint8" if vocab_size <= 256 else "uint16"
    specs = {
        "tokens": ArraySpec("tokens", None, dtype, ()),
        "doc_offsets": FIELDS["doc_offsets"].spec(None),
    }
    flat = np.array([t for d in docs for t in d], dtype=dtype)
    off = np.cumsum([0] + [len(d) for d in docs]).astype(np.int64)
    extra = {"vocab_size": vocab_size, "eot_id": eot_id}
    arrays = {"tokens": flat, "doc_offsets": off}
    return write_dataset(root, "tokens", specs, [(len(docs), arrays)], split="train", extra=extra)


def rewrite(root: Path, rel: str, data: np.ndarray) -> None:
    """Replace a shard file's array and make the manifest agree (size and sha256), as a careful
    tamperer would."""
    np.save(root / rel, data, allow_pickle=False)
    info = digest(root / rel)

    def change(d: dict[str, Any]) -> None:
        for shard in d["shards"]:
            if rel in shard["files"]:
                shard["files"][rel] = {"bytes": info.bytes, "sha256": info.sha256}

    edit_manifest(root, change)


def volumes(root: Path, shapes: list[tuple[int, int, int]], offsets: list[int], n: int) -> Path:
    """One shard of volumes whose manifest says `shapes` and `offsets` over n voxels."""
    specs = {
        "voxels": FIELDS["voxels"].spec(None),
        "volume_shape": FIELDS["volume_shape"].spec(None),
        "voxel_offsets": FIELDS["voxel_offsets"].spec(None),
    }
    arrays = {
        "voxels": np.arange(n, dtype=np.int16),
        "volume_shape": np.array(shapes, dtype=np.uint32),
        "voxel_offsets": np.array(offsets, dtype=np.int64),
    }
    extra = {"volumes": [{"pad": 0} for _ in shapes]}
    return write_dataset(root, "volumes", specs, [(len(shapes), arrays)], extra=extra)


def npy_header(shape: tuple[int, ...], descr: str = "|u1") -> bytes:
    """A .npy 1.0 header claiming `shape`, padded to prep's 128 bytes."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    text = text.ljust(128 - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def packed_table(folder: Path) -> Path:
    """A table of 40 rows packed by prep table: x (float), city (3 values), target y (2)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from prep.kinds.table.config import TableConfig
    from prep.kinds.table.pack import pack_table

    src = folder / "t.csv"
    n = 40
    city = [["oslo", "rome", "lima"][i % 3] for i in range(n)]
    y = [["yes", "no"][i % 2] for i in range(n)]
    pcsv.write_csv(pa.table({"x": np.arange(n) * 1.5, "city": city, "y": y}), src)
    out = folder / "packed"
    pack_table(TableConfig(src=str(src), out=str(out), jobs=1, target="y"), show_progress=False)
    return out


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
