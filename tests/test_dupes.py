"""Perceptual hashes at pack time, the near-pair search, groups, leakage, --drop-dupes and
`prep dupes` (issue 28)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import PackFn
from helpers import brute_force
from PIL import Image, ImageOps
from typer.testing import CliRunner

from prep.cli.main import app
from prep.inspect.dupes import (
    DEFAULT_DISTANCE,
    Hashes,
    dataset_hashes,
    dupe_groups,
    leakage,
    near_pairs,
)
from prep.kinds.images.config import PackConfig
from prep.media.image.decode import decode_image
from prep.media.image.groups import image_phash
from prep.run.errors import PrepError


def _jpegs(raw: Path, n: int) -> list[Path]:
    return sorted((raw / "images").rglob("*.jpg"))[:n]


def _q90(path: Path) -> bytes:
    """The upright photo re-encoded at quality 90, without its EXIF."""
    with Image.open(path) as im:
        buf = io.BytesIO()
        ImageOps.exif_transpose(im).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_hash_is_stable_under_q90_and_apart_across_photos(raw_demo: Path) -> None:
    paths = _jpegs(raw_demo, 8)
    own = np.array([image_phash(decode_image(p, (64,))[0]) for p in paths], np.uint64)
    again = [image_phash(decode_image(io.BytesIO(_q90(p)), (64,))[0]) for p in paths]
    moved = np.bitwise_count(own ^ np.array(again, np.uint64))
    assert moved.max() <= 4 and np.median(moved) <= 2, moved
    apart = np.bitwise_count(own[:, None] ^ own[None, :])[np.triu_indices(len(own), 1)]
    assert apart.min() > DEFAULT_DISTANCE, apart


@pytest.mark.parametrize("method", ["mih", "tables", "auto"])
def test_near_pairs_equal_brute_force(method: str) -> None:
    rng = np.random.default_rng(1)
    h = rng.integers(0, 2**63, 4000, dtype=np.uint64)
    for a, b in rng.permutation(len(h))[:80].reshape(40, 2).tolist():  # planted near pairs
        h[b] = h[a] ^ np.uint64(sum(1 << int(f) for f in rng.choice(64, 1 + a % 6, False)))
    h[7] = h[8]  # one exact pair
    truth = brute_force(h, h, 6)
    truth = truth[truth[:, 0] < truth[:, 1]]
    found = near_pairs(h, max_distance=6, method=method)
    assert len(found) >= 41
    np.testing.assert_array_equal(found, truth[np.lexsort((truth[:, 1], truth[:, 0]))])
    left, right = h[:2500], h[2500:]
    cross = near_pairs(left, right, max_distance=6)
    np.testing.assert_array_equal(cross, brute_force(left, right, 6))


def test_planted_dupes_grouped_and_drop_dupes(raw_demo: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    paths = _jpegs(raw_demo, 6)
    for k, p in enumerate(paths):
        shutil.copy(p, src / "a" / f"{k}.jpg")
    (src / "b" / "1-q90.jpg").write_bytes(_q90(paths[1]))
    shutil.copy(paths[4], src / "b" / "4-copy.jpg")
    (src / "b" / "9-cut.jpg").write_bytes(paths[0].read_bytes()[:3000])  # truncated
    runner = CliRunner()
    outs = [tmp_path / "j1", tmp_path / "j2"]
    args = ["pack", str(src), str(outs[0]), "--sizes", "32", "-q", "--drop-dupes"]
    args += ["--shard-size", "3"]
    res = runner.invoke(app, [*args, "-j", "1"])  # duplicates are not counted by --max-rejects
    assert (
        res.exit_code == 1
        and "(11.1% > --max-rejects 0.01: 1 truncated: b/9-cut.jpg, " in res.output
    )
    res = runner.invoke(app, [*args, "-j", "1", "--resume", "--max-rejects", "0.2"])
    assert res.exit_code == 0 and "3 rejected, 3 shards (3 reused)" in res.output, res.output
    args[2] = str(outs[1])
    assert runner.invoke(app, [*args, "-j", "2", "--max-rejects", "0.2"]).exit_code == 0
    files = sorted(f.name for f in outs[0].iterdir() if f.name != "manifest.json")
    for name in files:  # the same bytes for -j 1 and -j 2
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    rejects = [json.loads(line) for line in (outs[0] / "rejects.jsonl").read_text().splitlines()]
    assert [(r["path"], r["reason"]) for r in rejects] == [
        ("b/1-q90.jpg", "duplicate"),
        ("b/4-copy.jpg", "duplicate"),
        ("b/9-cut.jpg", "truncated"),
    ]
    assert "a/1.jpg, which is kept" in rejects[0]["message"]
    assert not dupe_groups(dataset_hashes(outs[0]))  # what was kept has no near-duplicate
    full = tmp_path / "full"
    (src / "b" / "9-cut.jpg").unlink()
    assert runner.invoke(app, ["pack", str(src), str(full), "--sizes", "32", "-q"]).exit_code == 0
    res = runner.invoke(app, ["dupes", str(full), "--json"])
    assert res.exit_code == 0, res.output
    groups = json.loads(res.output)["groups"]
    assert [g["paths"] for g in groups] == [["a/1.jpg", "b/1-q90.jpg"], ["a/4.jpg", "b/4-copy.jpg"]]
    assert [g["distances"][0] for g in groups] == [0, 0] and groups[1]["distances"] == [0, 0]
    h = dataset_hashes(full)
    assert h.digest.shape == (8, 32) and (h.digest[4] == h.digest[7]).all()


def test_leakage_between_two_datasets(raw_demo: Path, tmp_path: Path, pack_to: PackFn) -> None:
    paths = _jpegs(raw_demo, 6)
    train, val = tmp_path / "train" / "x", tmp_path / "val" / "x"
    train.mkdir(parents=True)
    val.mkdir(parents=True)
    for k, p in enumerate(paths[:4]):
        shutil.copy(p, train / f"{k}.jpg")
    (val / "0.jpg").write_bytes(_q90(paths[2]))  # leaked into val, re-encoded
    shutil.copy(paths[5], val / "1.jpg")
    for name in ("train", "val"):
        pack_to(tmp_path / name, tmp_path / f"p-{name}", sizes=[32])
    pairs = leakage(dataset_hashes(tmp_path / "p-train"), dataset_hashes(tmp_path / "p-val"))
    assert [(i, j) for i, j, _ in pairs] == [(2, 0)] and pairs[0][2] <= 4
    args = ["dupes", str(tmp_path / "p-train"), "--against", str(tmp_path / "p-val")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0 and "1 of 2 samples (50.0%)" in res.output, res.output


def test_leakage_between_splits_of_one_dataset(
    raw_demo: Path, tmp_path: Path, pack_to: PackFn
) -> None:
    """--split / --against-split: one dataset packed with --val-fraction, its splits' hashes in
    ImageShardDataset's order, and the pairs that cross from train to val."""
    from loaders import ImageShardDataset

    src = tmp_path / "mixed" / "x"
    src.mkdir(parents=True)
    for k, p in enumerate(_jpegs(raw_demo, 4)):
        shutil.copy(p, src / f"{k}.jpg")
        (src / f"{k}-q90.jpg").write_bytes(_q90(p))
    out = tmp_path / "split"
    pack_to(tmp_path / "mixed", out, sizes=[32], val_fraction=0.5)
    tr, va = (dataset_hashes(out, split=s) for s in ("train", "val"))
    assert len(va) == len(ImageShardDataset(out, split="val")) and len(tr) + len(va) == 8
    assert sorted(tr.paths + va.paths) == sorted(dataset_hashes(out).paths)
    crossing = {(a, b) for a in tr.paths for b in va.paths if a[2] == b[2]}
    found = {(tr.paths[i], va.paths[j]) for i, j, _ in leakage(tr, va)}
    assert found == crossing and crossing, (tr.paths, va.paths)
    args = ["dupes", str(out), "--split", "train", "--against-split", "val", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    pairs = json.loads(res.output)["pairs"]
    assert {(p["path"], p["against_path"]) for p in pairs} == found
    res = CliRunner().invoke(app, ["dupes", str(out), "--split", "test"])
    assert res.exit_code == 1 and "(train, val)" in res.output
    res = CliRunner().invoke(app, ["dupes", str(out), "--against-split", "val"])
    assert res.exit_code == 2 and "--split train" in res.output
    res = CliRunner().invoke(app, ["dupes", str(out), "--against", str(out), "--split", "val"])
    assert res.exit_code == 2 and "against itself" in res.output


def test_dataset_without_hashes(raw_demo: Path, tmp_path: Path, pack_to: PackFn) -> None:
    out = tmp_path / "old"
    pack_to(raw_demo / "images", out, sizes=[32], hashes=False, limit=6)
    with pytest.raises(PrepError, match="--hash"):
        dataset_hashes(out)
    h = dataset_hashes(out, compute=True)
    assert len(h) == 6 and h.paths[0].endswith(".jpg") and len(set(h.phash.tolist())) == 6
    pack_to(raw_demo / "images", tmp_path / "new", sizes=[32], limit=6)
    stored = dataset_hashes(tmp_path / "new")
    np.testing.assert_array_equal(stored.digest, h.digest)  # the same stored pixels' sha256
    res = CliRunner().invoke(app, ["dupes", str(out)])
    assert res.exit_code == 1 and "--hash" in res.output
    gray = tmp_path / "gray"  # one-channel JPEG samples decode as one channel
    pack_to(raw_demo / "images", gray, sizes=[32], hashes=False, limit=6, gray=True, codec="jpeg")
    from prep.inspect.stored import Stored

    assert Stored(gray, 32).value("image", 0).shape == (32, 32, 1)
    assert len(set(dataset_hashes(gray, compute=True).phash.tolist())) == 6


def test_copies_of_one_hash_are_searched_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """2,000 copies of one blank image: groups and leakage as a brute force has them, and the
    search sees each distinct hash once (not the 2 million pairs of the copies)."""
    import prep.media.image.groups as groups

    rng = np.random.default_rng(3)
    h = rng.integers(0, 2**63, 3000, dtype=np.uint64)
    h[:2000], h[2500] = h[0], h[0] ^ np.uint64(0b11)
    digest = rng.integers(0, 256, (3000, 32), dtype=np.uint8)
    train = Hashes(h, digest, [f"t{i}" for i in range(3000)])
    val = Hashes(h[[0, 2500, 2999]], digest[:3] ^ 1, ["v0", "v1", "v2"])
    seen: list[int] = []

    def distinct_only(a: np.ndarray, b: np.ndarray | None = None, max_distance: int = 6) -> Any:
        both = a if b is None else np.concatenate([a, b])
        seen.append(len(both))
        assert len(np.unique(a)) == len(a) and (b is None or len(np.unique(b)) == len(b))
        return near_pairs(a, b, max_distance)

    monkeypatch.setattr(groups, "near_pairs", distinct_only)
    [group] = dupe_groups(train)
    assert group.members == [*range(2000), 2500] and group.distances == [0] * 2000 + [2]
    got = leakage(train, val)
    truth = brute_force(h, val.phash, DEFAULT_DISTANCE)
    assert got == sorted(map(tuple, truth.tolist())) and len(got) == 2 * 2001 + 1
    assert max(seen) <= 1001 + 3


def test_max_distance_default_is_the_measured_one() -> None:
    assert PackConfig().max_distance == DEFAULT_DISTANCE
    res = CliRunner().invoke(app, ["dupes", "--help"])
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 0 and "Example: prep dupes" in text
    assert f"(default: {DEFAULT_DISTANCE})" in text and "[default:" not in text
