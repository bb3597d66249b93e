"""The hostile-dataset corpus of issues 23 and 34: small datasets made with prep, then changed
the way someone else's dataset could be (a manifest that lies, a file swapped, a header that
claims more than the file holds), each with its checksums recomputed so that only the content
lies. The families: the seven defects of issue 23 and what held then (here), every field kind
of a samples dataset, audio and video (tests/hostile_fields.py), every `extra` entry prep
writes and every field declaration (tests/hostile_extras.py), the shard index of format
version 4 (tests/hostile_index.py); and the source files `prep import` reads
(tests/hostile_sources.py).

`make_bases(folder, raw)` (tests/hostile_base.py) packs one dataset of each base;
`build(case, bases, out, outside)` copies the case's base to `out` and applies its change
(`outside`: a folder beside it, for the files a case points at). `CASES` lists them;
tests/test_hostile.py opens each one with every reader. Run as a script, it writes the corpus
to a folder: `python tests/hostile.py DIR`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
from hostile_base import (
    ALL,
    NONE,
    OPEN,
    READ,
    VERIFY,
    Case,
    Manifest,
    digest,
    edit,
    edit_manifest,
    make_bases,
    npy,
    rewrite,
)
from hostile_extras import EXTRA_CASES
from hostile_fields import FIELD_CASES
from hostile_index import INDEX_CASES

__all__ = ["AT_URL", "CASES", "KIND", "ONE_OF_EACH", "Case", "build", "build_corpus", "make_bases"]


# --- the seven defects -------------------------------------------------------------------


def _sha_path(m: Manifest) -> None:
    m["shards"][0]["files"]["label-00000.npy"]["sha256"] = "../../../../some/where/label.npy"


def _labels(root: Path, outside: Path) -> None:
    rewrite(root, "label-00001.npy", np.full(4, 99, np.uint8))


def _backwards(root: Path, outside: Path) -> None:
    off = npy(root, "image_32-offsets-00000.npy")
    off[1], off[2] = off[2], off[1]
    rewrite(root, "image_32-offsets-00000.npy", off)


def _hw_zero(root: Path, outside: Path) -> None:
    hw = npy(root, "image_hw_32-00000.npy")
    hw[0] = 0
    rewrite(root, "image_hw_32-00000.npy", hw)


def _external_link(root: Path, outside: Path) -> None:
    import h5py

    with h5py.File(outside / "elsewhere.h5", "w") as f:
        f["label"] = np.full(4, 7, np.uint8)
    with h5py.File(root / "shard-00000.h5", "a") as f:
        del f["label"]
        f["label"] = h5py.ExternalLink(str(outside / "elsewhere.h5"), "label")
    digest(root)


def _volume_wrap(root: Path, outside: Path) -> None:
    shape = npy(root, "image_shape-00000.npy")
    shape[0] = (2**21, 2**21, 2**22)  # 2**64 voxels: 0 in int64
    rewrite(root, "image_shape-00000.npy", shape)


def _npy_wrap(root: Path, outside: Path) -> None:
    """A header claiming (4, 2**32, 2**32, 3): 2**66 bytes, which wrap to 0 in int64. (Version 3
    let the manifest agree; version 4 derives the shape from the image field, sizes 1..16384.)"""
    path = root / "image_32-00000.npy"
    data = path.read_bytes()
    shape = (4, 2**32, 2**32, 3)
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': {shape}, }}"
    text = header.ljust(128 - 10 - 1) + "\n"
    path.write_bytes(
        b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode() + data[128:]
    )
    digest(root)


def _huge_size(m: Manifest) -> None:
    """A JPEG array at 1,000,000 px: a batch of it would be a 48 TB allocation."""
    big = 1_000_000
    for old, new in (("image_32", f"image_{big}"), ("image_crc_32", f"image_crc_{big}")):
        spec = m["arrays"].pop(old)
        m["arrays"][new] = spec | {"size": big}
        for shard in m["shards"]:
            shard["arrays"][new] = shard["arrays"].pop(old)
    m["arrays"][f"image_{big}"]["shape"] = [big, big, 3]
    m["fields"]["image"]["sizes"] = [big]


# --- manifests a JSON parser takes --------------------------------------------------------


def _deep(m: Manifest) -> str:
    deep = "[" * 100_000 + "]" * 100_000
    return json.dumps(m).replace('"extra": {', f'"deep": {deep}, "extra": {{', 1)


def _extra_list(m: Manifest) -> None:
    m["extra"] = []


def _no_column(m: Manifest) -> None:
    del m["fields"]["cat_0"]


def _no_vocab_size(m: Manifest) -> None:
    del m["fields"]["tokens"]["vocab_size"]


def _eot_string(m: Manifest) -> None:
    m["fields"]["tokens"]["eot_id"] = "0"


def _no_label(m: Manifest) -> None:
    del m["shards"][0]["arrays"]["label"]
    del m["shards"][0]["files"]["label-00000.npy"]


# --- values the GPU would trip over -------------------------------------------------------


def _token_ids(root: Path, outside: Path) -> None:
    tokens = npy(root, "tokens-train-00000.npy")
    tokens[3] = 200  # the vocabulary has 16
    rewrite(root, "tokens-train-00000.npy", tokens)


def _codes(root: Path, outside: Path) -> None:
    codes = npy(root, "cat_0-train-00000.npy")
    codes[2] = codes.max() + 50
    rewrite(root, "cat_0-train-00000.npy", codes)


def _empty_document(root: Path, outside: Path) -> None:
    off = npy(root, "tokens-offsets-train-00000.npy")
    off[1] = 0  # document 0 holds no tokens now; document 1 holds both
    rewrite(root, "tokens-offsets-train-00000.npy", off)


# --- what holds today ---------------------------------------------------------------------


def _renamed(root: Path, new: str) -> None:
    def rename(m: Manifest) -> None:
        shard = m["shards"][0]
        shard["files"][new] = shard["files"].pop("label-00000.npy")
        shard["arrays"]["label"]["file"] = new

    edit_manifest(root, rename)


def _dotdot(root: Path, outside: Path) -> None:
    shutil.copy(root / "label-00000.npy", root.parent / "label-00000.npy")
    _renamed(root, "../label-00000.npy")


def _absolute(root: Path, outside: Path) -> None:
    shutil.copy(root / "label-00000.npy", outside / "label.npy")
    _renamed(root, str(outside / "label.npy"))


def _symlink(root: Path, outside: Path) -> None:
    shutil.copy(root / "label-00000.npy", outside / "label.npy")
    (root / "label-00000.npy").unlink()
    (root / "label-00000.npy").symlink_to(outside / "label.npy")


def _fifo(root: Path, outside: Path) -> None:
    (root / "label-00000.npy").unlink()
    os.mkfifo(root / "label-00000.npy")


def _object(root: Path, outside: Path) -> None:
    rewrite(root, "label-00000.npy", np.array([0, 1, 0, 1], dtype=object), allow_pickle=True)


def _lying_header(root: Path, outside: Path) -> None:
    """The header (and the manifest) say 40 samples; the file holds 4."""

    def claim(m: Manifest) -> None:
        m["shards"][0]["arrays"]["image_32"]["length"] = 40

    edit_manifest(root, claim)
    path = root / "image_32-00000.npy"
    data = path.read_bytes()
    path.write_bytes(data[:128].replace(b"(4, 32, 32, 3)", b"(40, 32, 32, 3)") + data[128:])
    digest(root)


def _tampered_jpeg(root: Path, outside: Path) -> None:
    path = root / "image_32-00000.npy"
    data = bytearray(path.read_bytes())
    for k in range(200, 400, 7):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))
    digest(root)


ISSUE_23 = [
    Case("sha256 is a path", "images", edit(_sha_path), READ, "sha256", note="defect 1"),
    Case("labels outside classes", "images", _labels, READ, "label-00001.npy", note="defect 2"),
    Case("ragged offsets backwards", "jpeg", _backwards, READ, "offsets", note="defect 2"),
    Case("a side of 0 px", "keep", _hw_zero, READ, "image_hw_32", note="defect 2"),
    Case("HDF5 external link", "h5", _external_link, READ, "shard-00000.h5", note="defect 3"),
    Case("volume size wraps int64", "volumes", _volume_wrap, READ, "volume", note="defect 4"),
    Case("npy byte count wraps int64", "images", _npy_wrap, READ, "image_32", note="defect 5"),
    Case("image size unbounded", "jpeg", edit(_huge_size), READ, "1000000", note="defect 6"),
    Case("manifest nested 100,000 deep", "images", edit(_deep), ALL, "manifest.json"),
    Case("extra is a list", "images", edit(_extra_list), ALL, "extra"),
    Case("a table column without its field", "table", edit(_no_column), ALL, "cat_0"),
    Case("tokens without vocab_size", "tokens", edit(_no_vocab_size), ALL, "vocab_size"),
    Case("eot_id a string", "tokens", edit(_eot_string), ALL, "eot_id"),
    Case("a shard without labels", "images", edit(_no_label), ALL, "label"),
    Case("token ids beyond vocab_size", "tokens", _token_ids, frozenset((VERIFY,)), "tokens"),
    Case("category codes beyond vocabulary", "table", _codes, frozenset((VERIFY,)), "cat_0"),
    Case("a document of zero tokens", "tokens", _empty_document, NONE, ""),
    Case("a .. path", "images", _dotdot, READ, r"\.\./label-00000\.npy"),
    Case("an absolute path", "images", _absolute, READ, "label"),
    Case("a link out", "images", _symlink, READ, "label-00000.npy", url=False),
    Case("a FIFO", "images", _fifo, READ, "label-00000.npy", url=False),
    Case("object dtype", "images", _object, READ, "label-00000.npy"),
    Case("a header claiming more", "images", _lying_header, READ, "image_32-00000.npy"),
    Case("tampered JPEG bytes", "jpeg", _tampered_jpeg, frozenset((OPEN,)), "JPEG|image_32"),
]
CASES = ISSUE_23 + FIELD_CASES + EXTRA_CASES + INDEX_CASES
# The cases also opened at a file:// URL (tests/hostile_run.py): those whose files lie, which a
# URL's reader checks as they arrive. A lie in `extra` or `fields` is the manifest's, read alike
# for both.
AT_URL = frozenset(c.name for c in ISSUE_23 + FIELD_CASES + INDEX_CASES if c.url)
# One case of each family of defect: the slow passes of tests/test_hostile.py (s3, two
# workers) take these.
ONE_OF_EACH = (
    "sha256 is a path",  # a manifest's value taken as a path (defect 1)
    "ragged offsets backwards",  # values checked when a file arrives (defect 2)
    "HDF5 external link",  # a file that reads another file (defect 3)
    "volume size wraps int64",  # sizes that overflow (defects 4 and 5)
    "image size unbounded",  # an allocation without bound (defect 6)
    "manifest nested 100,000 deep",  # manifests a JSON parser takes
    "token ids beyond vocab_size",  # values the GPU would trip over
    "a .. path",  # names that leave the dataset
    "a header claiming more",  # files whose content lies
    "instances a byte short",  # a samples field's values (issue 34)
    "shards.npy transposed",  # the shard index (format version 4), fetched by its digest
)
KIND = {"images": "images", "jpeg": "images", "keep": "images", "h5": "images"}
KIND |= {"tokens": "tokens", "table": "table", "volumes": "volumes", "audio": "audio"}
KIND |= {b: "samples" for b in ("samples", "coco", "pairs", "hf", "wds")}
KIND |= {"clips": "clips", "clips-raw": "clips"}


def build(case: Case, bases: dict[str, Path], out: Path, outside: Path) -> Path:
    """The case's dataset at `out` (a copy of its base, changed)."""
    shutil.copytree(bases[case.base], out)
    outside.mkdir(parents=True, exist_ok=True)
    case.change(out, outside)
    return out


def build_corpus(top: Path) -> list[tuple[Case, Path]]:
    """Every case built in `top` as tests/hostile_run.py runs them: case-NN/ds (the dataset),
    case-NN/outside (the files it points at), empty case-NN/scratch and case-NN/cache; and
    every source case in source-NN (tests/hostile_sources.py)."""
    from hostile_sources import build_sources

    bases = make_bases(top / "bases", top / "raw")
    built = []
    for i, case in enumerate(CASES):
        folder = top / f"case-{i:02d}"
        for sub in ("scratch", "cache"):
            (folder / sub).mkdir(parents=True)
        built.append((case, build(case, bases, folder / "ds", folder / "outside")))
    build_sources(top)
    return built


def main(folder: str) -> None:
    for case, root in build_corpus(Path(folder)):
        print(f"{root}: {case.name} ({case.base})")


if __name__ == "__main__":
    main(sys.argv[1])
