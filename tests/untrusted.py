"""Datasets that lie, for the tests of issue 23 (test_untrusted_*, test_fuzz): written directly
with numpy, h5py, the `loaders.format` types and the fields, so that each test holds exactly the
lie it is about (imported as `untrusted`: tests/ is on sys.path)."""

from __future__ import annotations

import hashlib
import shutil
import struct
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from manifests import edit_manifest

from loaders.fields import Field, Image, Label, Tokens, Volume
from loaders.format import MANIFEST, ArrayRef, FileInfo, Manifest, Shard, array_name

Arrays = dict[str, np.ndarray]


def digest(path: Path) -> FileInfo:
    return FileInfo(path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())


def write_dataset(
    root: Path,
    fields: dict[str, Field],
    shards: list[tuple[int, Arrays]],
    *,
    h5: bool = False,
    split: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """A dataset of `fields` whose shard s holds shards[s] = (count, {array name: data}; a
    ragged array's offsets as NAME.offsets), one .npy file an array, or one .h5 file a shard;
    its shards listed in the manifest (no shard index)."""
    root.mkdir(parents=True, exist_ok=True)
    specs = {array_name(s.field, s.size): s for n, f in fields.items() for s in f.arrays(n)}
    records = []
    for s, (count, arrays) in enumerate(shards):
        refs: dict[str, ArrayRef] = {}
        files = {}
        if h5:
            rel = f"shard-{s:05d}.h5"
            with h5py.File(root / rel, "w") as f:
                for name, data in arrays.items():
                    f.create_dataset(name, data=data)
                    refs[name] = ArrayRef(rel, len(data), name)
            files[rel] = digest(root / rel)
        else:
            for name, data in arrays.items():
                rel = f"{name.replace('.', '-')}-{s:05d}.npy"
                np.save(root / rel, data, allow_pickle=False)
                refs[name], files[rel] = ArrayRef(rel, len(data)), digest(root / rel)
        for name in [n for n in refs if n.endswith(".offsets")]:
            refs[name.removesuffix(".offsets")].offsets = refs.pop(name)
        records.append(Shard(count, refs, files, split=split))
    described = {name: f.describe() for name, f in fields.items()}
    storage = "h5" if h5 else "npy"
    manifest = Manifest(storage, specs, records, fields=described, extra=extra or {})
    (root / MANIFEST).write_text(manifest.to_json())
    return root


def images(root: Path, n: int = 6, classes: int = 3, h5: bool = False) -> Path:
    """n 8 px images in one shard, labels i % classes."""
    names = tuple(f"c{i}" for i in range(classes))
    fields: dict[str, Field] = {"image": Image(sizes=(8,)), "label": Label(names)}
    data = {
        "image_8": np.full((n, 8, 8, 3), 7, np.uint8),
        "label": (np.arange(n) % classes).astype(np.uint8),
    }
    return write_dataset(root, fields, [(n, data)], h5=h5)


def tokens(
    root: Path, docs: list[list[int]], vocab_size: int = 256, eot_id: int | None = None
) -> Path:
    """One train shard holding `docs` (each already ending with eot_id when it has one)."""
    field = Tokens(vocab_size, eot_id=eot_id)
    dtype = field.arrays("tokens")[0].dtype  # uint8 for 256 ids, then uint16
    flat = np.array([t for d in docs for t in d], dtype=dtype)
    off = np.cumsum([0] + [len(d) for d in docs]).astype(np.int64)
    arrays = {"tokens": flat, "tokens.offsets": off}
    return write_dataset(root, {"tokens": field}, [(len(docs), arrays)], split="train")


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
    arrays = {
        "image": np.arange(n, dtype=np.int16),
        "image.offsets": np.array(offsets, dtype=np.int64),
        "image_shape": np.array(shapes, dtype=np.uint32),
    }
    extra = {"volumes": [{"pad": 0} for _ in shapes]}
    return write_dataset(root, {"image": Volume()}, [(len(shapes), arrays)], extra=extra)


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
