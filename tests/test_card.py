"""The dataset card: README.md in the Hugging Face layout, the same for the same dataset (no
time, no machine path), refreshed by an append with the user's license and text kept. Every
writing command leaves it beside its manifest at install: its counts are the loaders' own, its
code runs in the dataset's folder; `prep remove` and `prep compact` refresh it."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from loaders import CenterCrop, SampleDataset
from loaders.format import read_manifest
from prep.cli.main import app
from prep.demo.audio import make_audio_demo
from prep.demo.images import make_demo
from prep.demo.video import make_video_demo
from prep.demo.volumes import make_phantoms
from tests.test_append import run_pack, week1, week2

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "detection.py"


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image demo (and its import sources), two phantoms, sounds and clips: tiny."""
    root = tmp_path_factory.mktemp("card-raw")
    make_demo(root / "raw", count=16, seed=0, jobs=1, max_side=64, show_progress=False)
    make_phantoms(root / "vol", count=2, seed=0, side=24, dicom=False)
    make_audio_demo(root / "aud", per_class=2, seed=0)
    make_video_demo(root / "vid", per_class=1, seed=0)
    return root


# command -> (its arguments but OUT, from the raw folder; the card's task category)
COMMANDS: dict[str, tuple[str, str]] = {
    "pack": ("pack raw/images OUT --sizes 16", "image-classification"),
    "samples": (f"samples raw/detection.jsonl OUT --recipe {RECIPE}", "image-to-text"),
    "tokenize": ("tokenize raw/text OUT --tokenizer bytes", "text-generation"),
    "table": ("table raw/table/houses.csv OUT --target price", "tabular-regression"),
    "volumes": ("volumes vol/images OUT --labels vol/labels", "image-segmentation"),
    "audio": ("audio aud OUT", "audio-classification"),
    "video": ("video vid OUT --fps 4 --size 16", "video-classification"),
    "import coco": ("import coco raw/coco.json raw/images OUT", "object-detection"),
    "import hf": ("import hf raw/hf OUT", "image-classification"),
    "import pairs": (
        "import pairs raw/captions.csv OUT --image-column path --text-column caption",
        "image-to-text",
    ),
    "import webdataset": ("import webdataset WDS OUT", "image-classification"),
}


def write(raw: Path, args: str, out: Path) -> None:
    """`prep ARGS -q`, OUT the folder `out`, the other paths in `raw`."""
    words = [str(raw / a) if (raw / a).exists() else a for a in args.split()]
    words = [str(out) if a == "OUT" else a for a in words]
    words = [f"{raw}/raw/wds/shard-{{000000..000001}}.tar" if a == "WDS" else a for a in words]
    result = CliRunner().invoke(app, [*words, "-q"])
    assert result.exit_code == 0, result.output


def blocks(card: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", card, re.S)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_writes_its_card(
    raw: Path, tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, task = COMMANDS[command]
    out = tmp_path / "qzx"
    write(raw, args, out)
    card = (out / "README.md").read_text()
    head, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert head.startswith("license: other") and f"task_categories:\n- {task}\n" in head
    assert "size_categories:\n- n<1K\n" in head
    assert str(tmp_path) not in card and "qzx" not in card  # no path, no name
    ds = SampleDataset(out, crop=CenterCrop(8))  # the counts: the loaders' own
    total = int(re.search(r"(\d+) samples in", body).group(1))  # type: ignore[union-attr]
    assert total == len(ds) > 0
    rows = dict(re.findall(r"^\| (\w+) \| (\d+) \|$", body, re.M))
    splits = read_manifest(out).splits or ["all"]
    assert list(rows) == splits
    for split, n in rows.items():
        part = SampleDataset(out, crop=CenterCrop(8), split=None if split == "all" else split)
        assert int(n) == len(part)
    monkeypatch.chdir(out)  # its code runs where it lies: "." is the dataset
    loading, numpy_only = blocks(card)
    names: dict[str, Any] = {}
    exec(loading, names)
    assert len(names["ds"]) > 0
    exec(numpy_only, names)
    first = next(v for v in names.values() if isinstance(v, np.ndarray))
    assert len(first) > 0


def test_class_counts_are_the_folders_and_same_for_any_jobs(raw: Path, tmp_path: Path) -> None:
    for jobs in ("1", "2"):
        write(raw, f"audio aud OUT --jobs {jobs} --shard-size 2", tmp_path / f"j{jobs}")
    card = (tmp_path / "j1" / "README.md").read_bytes()
    assert card == (tmp_path / "j2" / "README.md").read_bytes()
    found = dict(re.findall(r"^\| (\w+) \| \d+ \| (\d+) \|$", card.decode(), re.M))
    want = {c.name: str(len(list(c.iterdir()))) for c in sorted((raw / "aud").iterdir())}
    assert found == want


def per_split(out: Path, gone: Collection[int] = ()) -> dict[str, list[int]]:
    """Samples a class in each split, read by the loaders; without the dataset indices `gone`
    (of a dataset nothing is removed from yet: each split's shards follow the manifest's)."""
    m = read_manifest(out)
    found = {}
    for split in m.splits:
        ds = SampleDataset(out, fields=["label"], split=split)
        held = np.flatnonzero(np.repeat(m.split_of(), m.counts()) == split)  # dataset indices
        labels = [int(x["label"]) for i, x in zip(held, ds, strict=False) if i not in gone]
        found[split] = np.bincount(labels, minlength=len(m.classes or [])).tolist()
    return found


def card_table(card: str) -> dict[str, list[int]]:
    """The card's class table, a column a split: split -> samples a class."""
    rows = re.findall(r"^\| (\w+) \| \d+ \| (\d+) \| (\d+) \|$", card, re.M)
    heads = re.search(r"^\| class \| id \| (\w+) \| (\w+) \|$", card, re.M).groups()  # type: ignore[union-attr]
    return {h: [int(r[1 + j]) for r in rows] for j, h in enumerate(heads)}


def test_remove_and_compact_refresh_the_card(raw: Path, tmp_path: Path) -> None:
    out = tmp_path / "pets"
    write(raw, "pack raw/images OUT --sizes 16 --shard-size 3 --val-fraction 0.25", out)
    want = per_split(out, {0, 4, 5})  # the dataset's indices, before the remove
    assert sorted(want) == ["train", "val"]  # two splits: a column each
    (tmp_path / "ids.txt").write_text("0\n4\n5\n")
    result = CliRunner().invoke(app, ["remove", str(out), "--ids", str(tmp_path / "ids.txt")])
    assert result.exit_code == 0, result.output
    card = (out / "README.md").read_text()
    assert per_split(out) == want  # the loaders skip the removed samples
    assert card_table(card) == want
    assert "3 samples are removed" in card and "`prep pack` with:" in card
    assert f"| val | {sum(want['val'])} |" in card and f"| train | {sum(want['train'])} |" in card
    result = CliRunner().invoke(app, ["compact", str(out), "--shard-size", "8"])
    assert result.exit_code == 0, result.output
    card = (out / "README.md").read_text()
    assert re.search(r"^13 samples in 3 shards", card, re.M) and "removed" not in card
    assert card_table(card) == want == per_split(out)
    said = read_manifest(out).extra["splits"]  # what `prep info` says a split lacks: recounted
    assert {s: said[s]["per_class"] for s in said} == want
    assert {s: said[s]["samples"] for s in said} == {s: sum(n) for s, n in want.items()}
    assert re.search(r"`prep compact`, 13 samples\n- `prep remove`, 13 samples", card)


def test_card_layout_counts_and_user_edits(tmp_path: Path) -> None:
    src, out = tmp_path / "photos", tmp_path / "pets"
    week1(src)
    run_pack(src, out, sizes=[16], shard_size=4, jobs=1)
    result = CliRunner().invoke(app, ["card", str(out)])
    assert result.exit_code == 0, result.output
    first = (out / "README.md").read_text()
    run_pack(src, out, sizes=[16], shard_size=4, jobs=2, overwrite=True)  # refreshes the card
    text = (out / "README.md").read_text()
    assert text == first  # no time, no path: the same card for any --jobs
    head = text.split("---\n")[1]  # the YAML front matter, as the Hub reads it
    assert "task_categories:\n- image-classification\n" in head
    assert "size_categories:\n- n<1K\n" in head and text.startswith("---\nlicense: ")
    assert "| cat | 0 | 5 |" in text and "| dog | 1 | 4 |" in text  # counted from the labels
    assert str(tmp_path) not in text and not re.search(r"\d\d:\d\d:\d\d", text)
    assert 'root = "."' in text and "pets" not in text  # nor the folder's name: it may move
    edited = text.replace("license: other  # set the dataset's license", "license: cc-by-4.0")
    (out / "README.md").write_text(edited + "\nOur notes: photos from the shelter.\n")
    week2(src)
    run_pack(src, out, append=True)  # the card is refreshed: counts new, the user's parts kept
    text = (out / "README.md").read_text()
    assert text.startswith("---\nlicense: cc-by-4.0\n")
    assert text.rstrip().endswith("Our notes: photos from the shelter.")
    assert "| ant | 2 | 2 |" in text and "| dog | 1 | 5 |" in text
    assert "`prep pack --append`, 12 samples" in text and "`prep pack`, 9 samples" in text
    # --overwrite replaces a dataset whose card prep wrote (it is prep's own)
    run_pack(src, out, sizes=[16], overwrite=True)
    assert (out / "README.md").read_text().rstrip().endswith("photos from the shelter.")


def test_merge_writes_the_card_of_the_whole(raw: Path, tmp_path: Path) -> None:
    for team in ("a", "b"):
        write(raw, "pack raw/images OUT --sizes 16", tmp_path / team)
    result = CliRunner().invoke(
        app, ["merge", str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "ab")]
    )
    assert result.exit_code == 0, result.output
    card = (tmp_path / "ab" / "README.md").read_text()
    one = dict(
        re.findall(
            r"^\| (\w+) \| \d+ \| (\d+) \|$", (tmp_path / "a" / "README.md").read_text(), re.M
        )
    )
    assert dict(re.findall(r"^\| (\w+) \| \d+ \| (\d+) \|$", card, re.M)) == {
        c: str(2 * int(n)) for c, n in one.items()
    }
    assert "32 samples in" in card and "`prep merge` with:" in card and str(tmp_path) not in card
