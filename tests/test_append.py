"""--append: only new inputs are packed, as new shards after the old; inputs the dataset holds
are skipped; class maps grow; settings that differ are refused; stats equal a full pack's; the
parent version is kept and readable (version=), and `prep log` lists the versions."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from loaders import ImageShardDataset
from loaders.format import read_manifest
from prep import PrepError
from prep.cli.main import app
from prep.kinds.images.config import PackConfig
from prep.kinds.images.pack import pack

RNG = np.random.default_rng(7)


def photo(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    h, w = 20 + seed % 7, 24 + seed % 5
    PILImage.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)


def week1(src: Path) -> list[str]:
    names = [f"cat/c{i}.png" for i in range(5)] + [f"dog/d{i}.png" for i in range(4)]
    for i, name in enumerate(names):
        photo(src / name, i)
    return names


def week2(src: Path) -> list[str]:
    """New photos: more dogs, and a class ("ant") that sorts before the old ones."""
    names = ["ant/a0.png", "ant/a1.png", "dog/d9.png"]
    for i, name in enumerate(names):
        photo(src / name, 100 + i)
    return names


def run_pack(src: Path, out: Path, **options: object) -> object:
    options.setdefault("jobs", 1)
    return pack(PackConfig(src=str(src), out=str(out), **options), show_progress=False)  # type: ignore[arg-type]


def by_source(root: Path, **kw: object) -> dict[str, tuple[np.ndarray, str]]:
    """Each sample's pixels and class name, by its source path."""
    ds = ImageShardDataset(root, size=16, fields=("image", "label", "index"), **kw)  # type: ignore[arg-type]
    classes = ds.store.manifest.classes or []
    out = {}
    for i in range(len(ds)):
        image, label, index = ds[i]
        source = ds.source(int(index))
        assert source is not None
        out[source] = (image.numpy(), classes[int(label)])
    return out


@pytest.fixture
def grown(tmp_path: Path) -> tuple[Path, Path, bytes, object]:
    """week 1 packed (sizes 16, shards of 4), then week 2 appended with no options but SRC."""
    src, out = tmp_path / "photos", tmp_path / "ds"
    week1(src)
    run_pack(src, out, sizes=[16], shard_size=4, codec="raw")
    before = (out / "manifest.json").read_bytes()
    week2(src)
    summary = pack(PackConfig(src=str(src), out=str(out), append=True, jobs=1), False)
    return src, out, before, summary


def test_append_packs_only_new_inputs_and_equals_a_full_pack(
    grown: tuple[Path, Path, bytes, object], tmp_path: Path
) -> None:
    src, out, _, summary = grown
    assert summary.skipped == 9 and summary.packed == 3  # type: ignore[attr-defined]
    assert summary.shards == 1  # type: ignore[attr-defined]  # only the new inputs' shard
    m = read_manifest(out)
    assert m.classes == ["cat", "dog", "ant"]  # old ids kept, the new class last
    assert m.num_samples == 12 and len(m.shards) == 4
    assert m.config["sizes"] == [16] and m.config["codec"] == "raw"  # the dataset's own
    full = tmp_path / "full"
    run_pack(src, full, sizes=[16], shard_size=4, codec="raw")
    mine, theirs = by_source(out), by_source(full)
    assert sorted(mine) == sorted(theirs)
    for source, (pixels, name) in theirs.items():
        np.testing.assert_array_equal(mine[source][0], pixels)
        assert mine[source][1] == name
    # the stats from exact per-shard sums: the full pack's, not recomputed from pixels
    assert m.extra["stats"] == read_manifest(full).extra["stats"]
    first = ImageShardDataset(out, size=16, fields=("label",))
    assert [int(first[i][0]) for i in range(9)] == [0] * 5 + [1] * 4  # old labels unchanged


def test_append_keeps_the_parent_version_readable(
    grown: tuple[Path, Path, bytes, object],
) -> None:
    _, out, before, _ = grown
    sha = hashlib.sha256(before).hexdigest()
    assert read_manifest(out).parent == sha
    assert (out / "versions" / sha / "manifest.json").read_bytes() == before
    old = by_source(out, version=sha)
    assert len(old) == 9 and not any(s.startswith("ant/") for s in old)
    assert len(by_source(out, version=sha[:10])) == 9  # a unique prefix names it too
    with pytest.raises(ValueError, match="keeps no version"):
        ImageShardDataset(out, size=16, version="0123abcd")
    lines = CliRunner().invoke(app, ["log", str(out)]).output.splitlines()
    newest = hashlib.sha256((out / "manifest.json").read_bytes()).hexdigest()
    assert [line[:12] for line in lines] == [newest[:12], sha[:12]]
    assert "pack --append: 12 samples" in lines[0] and "pack: 9 samples" in lines[1]


def test_old_shards_are_linked_not_rewritten(tmp_path: Path) -> None:
    src, out = tmp_path / "photos", tmp_path / "ds"
    week1(src)
    run_pack(src, out, sizes=[16], shard_size=4)
    inodes = {p.name: p.stat().st_ino for p in out.glob("*-0000[0-2].npy")}
    week2(src)
    run_pack(src, out, append=True)
    assert {n: (out / n).stat().st_ino for n in inodes} == inodes


def test_append_of_nothing_new_changes_nothing(
    grown: tuple[Path, Path, bytes, object],
) -> None:
    src, out, _, _ = grown
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    again = run_pack(src, out, append=True)
    assert again.skipped == 12 and again.packed == 0  # type: ignore[attr-defined]
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == files


def test_a_changed_input_is_packed_again(grown: tuple[Path, Path, bytes, object]) -> None:
    src, out, _, _ = grown
    photo(src / "cat/c0.png", 999)  # new bytes under an old name (a fixed photo)
    summary = run_pack(src, out, append=True)
    assert summary.packed == 1 and summary.skipped == 11  # type: ignore[attr-defined]


def test_settings_that_differ_are_refused_naming_them(
    grown: tuple[Path, Path, bytes, object],
) -> None:
    src, out, _, _ = grown
    photo(src / "cat/c7.png", 77)
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(PrepError, match=r"sizes \[32\] differs from the dataset's \[16\]"):
        run_pack(src, out, append=True, sizes=[32])
    result = CliRunner().invoke(app, ["pack", str(src), str(out), "--append", "--mode", "fit"])
    assert result.exit_code == 1 and "mode 'fit' differs from the dataset's" in result.output
    assert len(result.output.strip().splitlines()) == 1  # one line, no traceback
    assert (out / "manifest.json").read_bytes() == before
    assert not (out.parent / "ds.partial").exists()


def test_append_onto_what_prep_did_not_write_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "photos"
    week1(src)
    with pytest.raises(PrepError, match="holds no dataset"):
        run_pack(src, tmp_path / "new", append=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(PrepError, match="files prep did not write"):
        run_pack(src, other, append=True)
    assert sorted(os.listdir(other)) == ["notes.txt"]
    ds = tmp_path / "ds"
    run_pack(src, ds, sizes=[16])
    with pytest.raises(PrepError, match="--append and --overwrite"):
        run_pack(src, ds, append=True, overwrite=True)


def test_cli_append_prints_what_it_skipped(tmp_path: Path) -> None:
    src, out = tmp_path / "photos", tmp_path / "ds"
    week1(src)
    run_pack(src, out, sizes=[16])
    week2(src)
    result = CliRunner().invoke(app, ["pack", str(src), str(out), "--append", "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert "12 inputs (9 already in the dataset), 3 packed" in result.output
    state = json.loads((out / "inputs.json").read_text())
    assert len(state["inputs"]) == 12 and sum(r["shard"]["count"] for r in state["records"]) == 12


def test_a_copied_dataset_appends_too(
    grown: tuple[Path, Path, bytes, object], tmp_path: Path
) -> None:
    src, out, _, _ = grown
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    photo(src / "dog/d20.png", 20)
    assert run_pack(src, copy, append=True).packed == 1  # type: ignore[attr-defined]
    assert read_manifest(copy).num_samples == 13 and read_manifest(out).num_samples == 12


def test_append_onto_a_running_pack_is_refused(
    grown: tuple[Path, Path, bytes, object],
) -> None:
    from prep.run.guard import locked

    src, out, _, _ = grown
    photo(src / "dog/d30.png", 30)
    before = (out / "manifest.json").read_bytes()
    with locked(out), pytest.raises(PrepError, match="is being written by pid"):
        run_pack(src, out, append=True)  # this process holds the lock as a running pack does
    assert (out / "manifest.json").read_bytes() == before


def test_rejects_are_kept_once(tmp_path: Path) -> None:
    src, out = tmp_path / "photos", tmp_path / "ds"
    week1(src)
    (src / "cat" / "broken.png").write_bytes(b"not a png")
    run_pack(src, out, sizes=[16], max_rejects=0.5)
    week2(src)
    run_pack(src, out, append=True, max_rejects=0.5)  # broken.png is held: not listed again
    lines = (out / "rejects.jsonl").read_text().splitlines()
    assert [json.loads(line)["path"] for line in lines] == ["cat/broken.png"]
    assert read_manifest(out).rejects == 1
