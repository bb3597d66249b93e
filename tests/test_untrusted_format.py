"""Opening a dataset someone else made (issue 23, the format side): every lie a manifest or a
header can tell is one FormatError naming the file, never a traceback, a wrong sample or an
allocation the header merely claims.

Datasets are written directly (tests/untrusted.py), each holding exactly the lie its test is
about; test_untrusted_manifest.py has the manifests JSON accepts and the values verify reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from untrusted import digest, edit_manifest, images, npy_header, rewrite, tokens, volumes

from loaders import DocumentDataset, ImageShardDataset, TokenWindowDataset
from loaders.fields.checks import check_files, load_manifest
from loaders.format import ArrayRef, ArraySpec, FormatError, check_array, read_manifest

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


def test_tokenizer_sha256_is_adigest(tmp_path: Path) -> None:
    root = tokens(tmp_path / "tok", [[1, 2, 3]])
    tok = {"tokenizer": "tokenizer.json", "tokenizer_sha256": "../../escape"}
    edit_manifest(root, lambda d: d["fields"]["tokens"].update(tok))
    with pytest.raises(FormatError, match=r"tokenizer_sha256 '\.\./\.\./escape' is not a digest"):
        load_manifest(root)


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
            bytes=shard.stat().st_size, sha256=digest(shard).sha256
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


def test_volume_sizes_that_wrap_int64_are_refused(tmp_path: Path) -> None:
    # (2^31 - 1) * 2^31 * 4 = 2^64 - 2^33 wraps to -2^33 in int64: an offset of -2^33 matched it.
    wrap = (2**31 - 1, 2**31, 4)
    rest = (16, 2**29 + 1, 1)  # 2^33 + 16 voxels: back to the 16 voxels stored
    root = volumes(tmp_path / "vol", [wrap, rest], [0, -(2**33), 16], 16)
    with pytest.raises(FormatError, match="offsets of image"):
        load_manifest(root)


def test_negative_voxel_offsets_are_refused(tmp_path: Path) -> None:
    root = volumes(tmp_path / "vol", [(1, 1, 4), (1, 1, 4)], [0, 4, 8], 8)
    rewrite(root, "image-offsets-00000.npy", np.array([0, -4, 8], np.int64))
    with pytest.raises(FormatError, match="offsets of image"):
        load_manifest(root)


def test_good_volumes_pass(tmp_path: Path) -> None:
    load_manifest(volumes(tmp_path / "vol", [(1, 2, 2), (2, 1, 2)], [0, 4, 8], 8))


def test_offsets_whose_differences_wrap_int64_are_refused(tmp_path: Path) -> None:
    """np.diff wraps: [0, 2^63 - 1, -2, 5] once passed as never decreasing, and document 2
    read tokens[-2:5]."""
    root = tokens(tmp_path / "tok", [[1, 2], [3], [4, 5]])
    rewrite(root, "tokens-offsets-00000.npy", np.array([0, 2**63 - 1, -2, 5], np.int64))
    with pytest.raises(FormatError, match="the offsets of tokens are not 4 from 0"):
        DocumentDataset(root, split="train")


# ---------------------------------------------------------------- 4. check_array's byte count


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
    path, spec = tmp_path / "cut.npy", ArraySpec("tokens", None, "int64", ())  # offsets
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


# ---------------------------------------------------------------- 8. empty documents


def test_empty_document_loads(tmp_path: Path) -> None:
    root = tokens(tmp_path / "tok", [[5, 6, 0], [], [0], [7, 0], [8] * 20 + [0]], eot_id=0)
    ds = DocumentDataset(root, split="train")
    assert [d.tolist() for d in ds] == [[5, 6], [], [], [7], [8] * 20]
    assert len(TokenWindowDataset(root, block_size=4, split="train")) > 0


def test_document_without_its_eot_keeps_its_tokens(tmp_path: Path) -> None:
    root = tokens(tmp_path / "tok", [[5, 6], [7, 0]], eot_id=0)
    assert [d.tolist() for d in DocumentDataset(root, split="train")] == [[5, 6], [7]]
