"""Opening a dataset someone else made (issue 23, the format side): every lie a manifest or a
header can tell is one FormatError naming the file, never a traceback, a wrong sample or an
allocation the header merely claims.

Datasets are written here directly with numpy, h5py and the `loaders.format` types, so that each
test can hold exactly the lie it is about."""

from __future__ import annotations

import hashlib
import json
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from loaders import DocumentDataset, ImageShardDataset, TableDataset, TokenWindowDataset
from loaders.fields import FIELDS
from loaders.format import (
    MANIFEST,
    ArrayRef,
    ArraySpec,
    FileInfo,
    FormatError,
    Manifest,
    Shard,
    check_array,
    check_files,
    load_manifest,
    read_manifest,
)

Arrays = dict[str, np.ndarray]


def _digest(path: Path) -> FileInfo:
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
            files[rel] = _digest(root / rel)
        else:
            for name, data in arrays.items():
                rel = f"{name}-{s:05d}.npy"
                np.save(root / rel, data, allow_pickle=False)
                refs[name], files[rel] = ArrayRef(rel, len(data)), _digest(root / rel)
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


def edit_manifest(root: Path, change: Any) -> Path:
    path = root / MANIFEST
    d = json.loads(path.read_text())
    change(d)
    path.write_text(json.dumps(d))
    return root


def rewrite(root: Path, rel: str, data: np.ndarray) -> None:
    """Replace a shard file's array and make the manifest agree (size and sha256), as a careful
    tamperer would."""
    np.save(root / rel, data, allow_pickle=False)
    info = _digest(root / rel)

    def change(d: dict[str, Any]) -> None:
        for shard in d["shards"]:
            if rel in shard["files"]:
                shard["files"][rel] = {"bytes": info.bytes, "sha256": info.sha256}

    edit_manifest(root, change)


# ---------------------------------------------------------------- 1. sha256 is a digest


@pytest.mark.parametrize(
    "sha",
    ["../../../../some/where/label.npy", "A" * 64, "a" * 63, "g" * 64, "a" * 64 + "\n"],
    ids=["path", "upper", "short", "not-hex", "newline"],
)
def test_sha256_is_64_lowercase_hex(tmp_path: Path, sha: str) -> None:
    root = images(tmp_path / "ds")
    edit_manifest(root, lambda d: d["shards"][0]["files"]["label-00000.npy"].update(sha256=sha))
    with pytest.raises(FormatError, match=r"label-00000\.npy.*sha256"):
        read_manifest(root)


def test_tokenizer_sha256_is_a_digest(tmp_path: Path) -> None:
    root = tokens(tmp_path / "tok", [[1, 2, 3]])
    tok = {"name": "x", "file": "tokenizer.json", "sha256": "../../escape"}
    edit_manifest(root, lambda d: d["extra"].update(tokenizer=tok))
    with pytest.raises(FormatError, match="tokenizer"):
        read_manifest(root)


# ---------------------------------------------------------------- 2. HDF5 links


@pytest.mark.parametrize("link", ["external", "soft"])
def test_h5_links_are_refused(tmp_path: Path, link: str) -> None:
    root = images(tmp_path / "ds", h5=True)
    other = tmp_path / "elsewhere.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("label", data=np.arange(200, 206, dtype=np.uint8))
        f.create_dataset("pad", data=np.zeros(4096, np.uint8))  # the label's data further in
    shard = root / "shard-00000.h5"
    with h5py.File(shard, "a") as f:
        f.create_dataset("spare", data=f["label"][()])
        del f["label"]
        f["label"] = (
            h5py.ExternalLink(str(other), "label")
            if link == "external"
            else h5py.SoftLink("/spare")
        )
    edit_manifest(
        root,
        lambda d: d["shards"][0]["files"]["shard-00000.h5"].update(
            bytes=shard.stat().st_size, sha256=_digest(shard).sha256
        ),
    )
    with pytest.raises(FormatError, match=r"shard-00000.h5.*label.*link"):
        load_manifest(root)
    assert check_files(root, read_manifest(root), checksums=True)  # `prep verify` says so too


def test_h5_hard_links_still_load(tmp_path: Path) -> None:
    root = images(tmp_path / "ds", h5=True)
    ds = ImageShardDataset(root, fields=("image", "label"))
    assert ds[4][1].item() == 1


# ---------------------------------------------------------------- 3. volume sizes


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


def test_volume_sizes_that_wrap_int64_are_refused(tmp_path: Path) -> None:
    # (2^31 - 1) * 2^31 * 4 = 2^64 - 2^33 wraps to -2^33 in int64: an offset of -2^33 matched it.
    wrap = (2**31 - 1, 2**31, 4)
    rest = (16, 2**29 + 1, 1)  # 2^33 + 16 voxels: back to the 16 voxels stored
    root = volumes(tmp_path / "vol", [wrap, rest], [0, -(2**33), 16], 16)
    with pytest.raises(FormatError, match="voxel_offsets"):
        load_manifest(root)


def test_negative_voxel_offsets_are_refused(tmp_path: Path) -> None:
    root = volumes(tmp_path / "vol", [(1, 1, 4), (1, 1, 4)], [0, 4, 8], 8)
    rewrite(root, "voxel_offsets-00000.npy", np.array([0, -4, 8], np.int64))
    with pytest.raises(FormatError, match="voxel_offsets"):
        load_manifest(root)


def test_good_volumes_pass(tmp_path: Path) -> None:
    load_manifest(volumes(tmp_path / "vol", [(1, 2, 2), (2, 1, 2)], [0, 4, 8], 8))


def test_offsets_whose_differences_wrap_int64_are_refused(tmp_path: Path) -> None:
    """np.diff wraps: [0, 2^63 - 1, -2, 5] once passed as never decreasing, and document 2
    read tokens[-2:5]."""
    root = tokens(tmp_path / "tok", [[1, 2], [3], [4, 5]])
    rewrite(root, "doc_offsets-00000.npy", np.array([0, 2**63 - 1, -2, 5], np.int64))
    with pytest.raises(FormatError, match="doc_offsets do not run from 0"):
        DocumentDataset(root, split="train")


# ---------------------------------------------------------------- 4. check_array's byte count


def npy_header(shape: tuple[int, ...], descr: str = "|u1") -> bytes:
    """A .npy 1.0 header claiming `shape`, padded to prep's 128 bytes."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    text = text.ljust(128 - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def test_byte_count_that_wraps_int64_is_too_short(tmp_path: Path) -> None:
    """16 * 2^32 * 2^32 * 3 bytes wrapped to 0 in int64, and the size check was skipped."""
    path = tmp_path / "image.npy"
    path.write_bytes(npy_header((16, 2**32, 2**32, 3)) + bytes(64))
    spec = ArraySpec("image", 2**32, "uint8", (2**32, 2**32, 3))
    with pytest.raises(FormatError, match=r"image.npy.*needs \d+ bytes, the file has 192"):
        check_array(path, ArrayRef("image.npy", 16), spec)


def test_every_truncated_header_is_refused(tmp_path: Path) -> None:
    """A .npy file cut anywhere in its header (a struct.error once, 10 bytes in)."""
    whole = npy_header((4,), "<i8") + bytes(32)
    path, spec = tmp_path / "cut.npy", FIELDS["doc_offsets"].spec(None)
    for end in range(len(whole)):
        path.write_bytes(whole[:end])
        with pytest.raises(FormatError, match=r"cut\.npy"):
            check_array(path, ArrayRef("cut.npy", 4), spec)


# ---------------------------------------------------------------- 5. image sizes are bounded


@pytest.mark.parametrize("codec", ["raw", "jpeg"])
@pytest.mark.parametrize("size", [1_000_000, 2**32, 0])
def test_image_size_is_bounded_at_open(tmp_path: Path, codec: str, size: int) -> None:
    root = images(tmp_path / "ds")
    big = f"image_{size}"

    def change(d: dict[str, Any]) -> None:
        d["arrays"][big] = {**d["arrays"].pop("image_8"), "size": size, "codec": codec}
        d["arrays"][big]["shape"] = [size, size, 3]
        d["shards"][0]["arrays"][big] = d["shards"][0]["arrays"].pop("image_8")

    edit_manifest(root, change)
    with pytest.raises(FormatError, match=f"array {big}: size {size} is not 1..16384"):
        read_manifest(root)
    with pytest.raises(FormatError, match=big):
        ImageShardDataset(root)


# ---------------------------------------------------------------- 6. manifests JSON accepts


def test_deeply_nested_manifest(tmp_path: Path) -> None:
    root = images(tmp_path / "ds")
    (root / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FormatError, match=r"manifest\.json"):
        read_manifest(root)


def test_deeply_nested_extra(tmp_path: Path) -> None:
    root = images(tmp_path / "ds")
    text = (
        (root / MANIFEST)
        .read_text()
        .replace('"extra": {}', '"extra": ' + "[" * 100_000 + "]" * 100_000)
    )
    (root / MANIFEST).write_text(text)
    with pytest.raises(FormatError, match=r"manifest\.json"):
        ImageShardDataset(root)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(extra=[1, 2]), "extra"),
        (lambda d: d.update(config="x"), "config"),
        (lambda d: d["extra"].pop("eot_id"), "eot_id"),
        (lambda d: d["extra"].update(eot_id="5"), "eot_id"),
        (lambda d: d["extra"].update(eot_id=True), "eot_id"),
        (lambda d: d["extra"].update(eot_id=300), "eot_id"),
        (lambda d: d["extra"].pop("vocab_size"), "vocab_size"),
        (lambda d: d["extra"].update(vocab_size=2.5), "vocab_size"),
        (lambda d: d["extra"].update(vocab_size=0), "vocab_size"),
    ],
    ids=[
        "extra-list",
        "config-str",
        "no-eot",
        "eot-str",
        "eot-bool",
        "eot-too-big",
        "no-vocab",
        "vocab-float",
        "vocab-0",
    ],
)
def test_token_manifest_extra(tmp_path: Path, change: Any, message: str) -> None:
    root = edit_manifest(tokens(tmp_path / "tok", [[1, 2, 3]], eot_id=3), change)
    with pytest.raises(FormatError, match=message):
        read_manifest(root)
    with pytest.raises(FormatError, match=message):
        DocumentDataset(root, split="train")


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from prep.kinds.table.config import TableConfig
    from prep.kinds.table.pack import pack_table

    src = tmp_path_factory.mktemp("table") / "t.csv"
    n = 40
    city = [["oslo", "rome", "lima"][i % 3] for i in range(n)]
    y = [["yes", "no"][i % 2] for i in range(n)]
    pcsv.write_csv(pa.table({"x": np.arange(n) * 1.5, "city": city, "y": y}), src)
    out = src.parent / "packed"
    pack_table(TableConfig(src=str(src), out=str(out), jobs=1, target="y"), show_progress=False)
    return out


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["extra"].pop("columns"), "columns"),
        (lambda d: d["extra"].update(columns={"a": 1}), "columns"),
        (lambda d: d["extra"]["columns"].append(5), "columns"),
        (lambda d: d["extra"].pop("arrays"), "arrays"),
        (lambda d: d["extra"]["arrays"].update(cat_0="nowhere"), "nowhere"),
        (lambda d: d["extra"]["arrays"].pop("cat_0"), "cat_0"),
        (lambda d: d["extra"]["columns"][1].update(vocab="abc"), "vocab"),
        (lambda d: d["extra"]["columns"][0].pop("kind"), "kind"),
        (lambda d: d["extra"]["columns"][0].update(mean="x"), "mean"),
    ],
    ids=[
        "no-columns",
        "columns-dict",
        "column-int",
        "no-arrays",
        "unknown-column",
        "array-unnamed",
        "vocab-str",
        "no-kind",
        "mean-str",
    ],
)
def test_table_manifest_extra(table: Path, tmp_path: Path, change: Any, message: str) -> None:
    root = edit_manifest(_copy(table, tmp_path / "t"), change)
    with pytest.raises(FormatError, match=message):
        read_manifest(root)
    with pytest.raises(FormatError, match=message):
        TableDataset(root)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["extra"].pop("volumes"),
        lambda d: d["extra"]["volumes"].pop(),
        lambda d: d["extra"]["volumes"][0].update(pad="0"),
        lambda d: d["extra"].update(targets=[{"array": "nowhere", "classes": None}]),
    ],
    ids=["no-volumes", "too-few", "pad-str", "target-array"],
)
def test_volume_manifest_extra(tmp_path: Path, change: Any) -> None:
    root = edit_manifest(volumes(tmp_path / "vol", [(1, 1, 4)], [0, 4], 4), change)
    with pytest.raises(FormatError, match=r"extra\.(volumes|targets)"):
        read_manifest(root)


# ---------------------------------------------------------------- 7. values against the manifest


def test_token_ids_beyond_vocab(tmp_path: Path) -> None:
    root = tokens(tmp_path / "tok", [[1, 2, 299, 3], [4]], vocab_size=300)
    assert check_files(root, read_manifest(root), checksums=True) == []
    edit_manifest(root, lambda d: d["extra"].update(vocab_size=299))
    problems = check_files(root, read_manifest(root), checksums=True)
    assert (
        len(problems) == 1
        and "tokens-00000.npy: token id 299 is not below vocab_size 299" in (problems[0])
    )
    assert check_files(root, read_manifest(root)) == []  # opening reads no token


def test_prep_verify_checks_values(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from prep.cli import app

    root = tokens(tmp_path / "tok", [[1, 2, 299, 3]], vocab_size=300)
    assert CliRunner().invoke(app, ["verify", str(root)]).exit_code == 0
    edit_manifest(root, lambda d: d["extra"].update(vocab_size=200))
    result = CliRunner().invoke(app, ["verify", str(root)])
    assert result.exit_code == 1 and "token id 299 is not below vocab_size 200" in result.output


def test_table_codes_beyond_vocab(table: Path, tmp_path: Path) -> None:
    root = _copy(table, tmp_path / "t")
    m = read_manifest(root)
    assert check_files(root, m, checksums=True) == []
    for name, top in (("cat_0", 4), ("target", 1)):  # 0, 1, then 3 cities; 2 classes
        rel = m.shards[0].arrays[name].file
        codes = np.load(root / rel)
        codes[-1] = top + 1
        rewrite(root, rel, codes)
        problems = check_files(root, read_manifest(root), checksums=True)
        assert any(f"{rel}: code {top + 1} is beyond" in p for p in problems), problems
        codes[-1] = top
        rewrite(root, rel, codes)
        assert check_files(root, read_manifest(root), checksums=True) == []


def test_volume_target_codes_beyond_classes(tmp_path: Path) -> None:
    root = volumes(tmp_path / "vol", [(1, 1, 4), (1, 1, 4)], [0, 4, 8], 8)
    m = read_manifest(root)
    rel = "volume_target_0-00000.npy"
    np.save(root / rel, np.array([2, 3], np.uint8))
    m.arrays["volume_target_0"] = FIELDS["volume_target"].spec(0, max_value=3)
    m.shards[0].arrays["volume_target_0"] = ArrayRef(rel, 2)
    m.shards[0].files[rel] = _digest(root / rel)
    m.extra["targets"] = [{"column": "grade", "array": "volume_target_0", "classes": list("abc")}]
    (root / MANIFEST).write_text(m.to_json())
    assert check_files(root, read_manifest(root)) == []  # opening reads no target
    problems = check_files(root, read_manifest(root), values=True)
    assert len(problems) == 1 and "code 3 is beyond column grade's codes 0..2" in problems[0]


def test_value_checks_run_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunked pass: 8 MB of tokens read 1 MB at a time, the bad id in the last chunk."""
    n = 4_000_000
    root = tokens(tmp_path / "tok", [[1] * (n - 1) + [299]], vocab_size=300)
    from loaders.format import values

    monkeypatch.setattr(values, "CHUNK_BYTES", 1 << 20)
    edit_manifest(root, lambda d: d["extra"].update(vocab_size=299))
    m = read_manifest(root)
    tracemalloc.start()
    try:
        problems = check_files(root, m, values=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(problems) == 1 and "299" in problems[0]
    assert peak < 4 << 20, peak


# ---------------------------------------------------------------- 8. empty documents


def test_empty_document_loads(tmp_path: Path) -> None:
    root = tokens(tmp_path / "tok", [[5, 6, 0], [], [0], [7, 0], [8] * 20 + [0]], eot_id=0)
    ds = DocumentDataset(root, split="train")
    assert [d.tolist() for d in ds] == [[5, 6], [], [], [7], [8] * 20]
    assert len(TokenWindowDataset(root, block_size=4, split="train")) > 0


def test_document_without_its_eot_keeps_its_tokens(tmp_path: Path) -> None:
    root = tokens(tmp_path / "tok", [[5, 6], [7, 0]], eot_id=0)
    assert [d.tolist() for d in DocumentDataset(root, split="train")] == [[5, 6], [7]]
