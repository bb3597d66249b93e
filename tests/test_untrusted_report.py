"""prep report, info and preview on datasets someone else made (issue 34): no file written or
read outside the dataset or OUT, no traceback on odd values, and a report that does not stop the
next `prep pack --overwrite`."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner, Result
from untrusted import edit_manifest

from loaders.format import REJECTS
from prep.cli.main import app
from prep.inspect.htmlreport import write_report
from prep.inspect.tune import TuneResult, TuneRow, plot

PACK = ["--sizes", "8", "--jobs", "1", "-q"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line(res: Result) -> None:
    """A refusal or a finish, never a traceback (CliRunner keeps it in res.exception)."""
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output


def source(folder: Path, classes: tuple[str, ...] = ("cat", "dog"), n: int = 2) -> Path:
    """Class folders of n noise PNGs, 12 px."""
    rng = np.random.default_rng(0)
    for c in classes:
        (folder / c).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            pixels = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / c / f"{i}.png")
    return folder


@pytest.fixture
def packed_small(tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    res = invoke("pack", source(tmp_path / "src"), out, *PACK)
    assert res.exit_code == 0, res.output
    return out


# -- item 5: a report inside the dataset is the dataset's ---------------------------------------


def test_a_report_in_the_dataset_does_not_stop_overwrite(
    tmp_path: Path, packed_small: Path
) -> None:
    res = invoke("report", packed_small, "-n", "1", "-q")
    assert res.exit_code == 0 and res.output.strip() == str(packed_small / "report.html")
    res = invoke("pack", tmp_path / "src", packed_small, *PACK, "--overwrite")
    assert res.exit_code == 0, res.output
    assert not (packed_small / "report.html").exists()  # it described the dataset replaced
    (packed_small / "report.html").mkdir()  # a folder of that name is not a page prep wrote
    (packed_small / "report.html" / "notes.txt").write_text("mine")
    res = invoke("pack", tmp_path / "src", packed_small, *PACK, "--overwrite")
    assert res.exit_code == 1 and "did not write (report.html)" in res.output
    assert (packed_small / "report.html" / "notes.txt").read_text() == "mine"


# -- item 7: nothing written through a link the dataset ships -----------------------------------


def test_report_replaces_links_it_finds_and_never_writes_through_them(
    tmp_path: Path, packed_small: Path
) -> None:
    victim, page_victim = tmp_path / "victim.txt", tmp_path / "page-victim.txt"
    victim.write_text("keep")
    page_victim.write_text("keep too")
    # The old temp name was ROOT/.report.html.tmpPID: a link for this process's pid
    (packed_small / f".report.html.tmp{os.getpid()}").symlink_to(victim)
    (packed_small / "report.html").symlink_to(page_victim)
    before = set(os.listdir(packed_small))
    out = write_report(packed_small, per_class=1)
    assert victim.read_text() == "keep" and page_victim.read_text() == "keep too"
    assert not out.is_symlink() and out.read_text().startswith("<!DOCTYPE html>")
    assert set(os.listdir(packed_small)) == before  # no temp file left

    elsewhere = tmp_path / "reports" / "r.html"  # --out: a dataset that cannot take a page
    listing = sorted(os.listdir(packed_small))
    res = invoke("report", packed_small, "--out", elsewhere, "-n", "1", "-q")
    assert res.exit_code == 0 and res.output.strip() == str(elsewhere) and elsewhere.is_file()
    assert sorted(os.listdir(packed_small)) == listing


def test_preview_and_tune_plot_replace_a_link_not_its_target(
    tmp_path: Path, packed_small: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    sheet = packed_small / "sheet.png"
    sheet.symlink_to(victim)
    res = invoke("preview", packed_small, "-o", sheet)
    assert res.exit_code == 0, res.output
    assert victim.read_bytes() == b"keep" and not sheet.is_symlink()
    assert Image.open(sheet).format == "PNG"
    chart = packed_small / "tune.jpg"
    chart.symlink_to(victim)
    result = TuneResult(packed_small, 8, 4, 2, ("image",), 4, 100)
    result.rows = [TuneRow(0, 100.0, 100.0, 1, 0), TuneRow(1, 300.0, 100.0, 2, 0)]
    plot(result, chart)
    assert victim.read_bytes() == b"keep" and Image.open(chart).format == "JPEG"


# -- item 8: rejects.jsonl read like every other dataset file -----------------------------------


def _report_text(root: Path) -> tuple[Result, str]:
    res = invoke("report", root, "-n", "1", "-q")
    one_line(res)
    assert res.exit_code == 0, res.output
    return res, (root / "report.html").read_text()


def test_rejects_linked_outside_the_dataset_are_not_read(
    tmp_path: Path, packed_small: Path
) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"path": "SECRET-PATH", "reason": "SECRET-REASON"}) + "\n")
    (packed_small / REJECTS).unlink()  # prep wrote an empty one
    (packed_small / REJECTS).symlink_to(secret)
    _, text = _report_text(packed_small)
    assert "SECRET" not in text
    assert "rejects.jsonl" in text and "links outside the dataset folder" in text
    (packed_small / REJECTS).unlink()
    os.mkfifo(packed_small / REJECTS)  # no writer: a blocking open would wait forever
    _, text = _report_text(packed_small)
    assert "rejects.jsonl not read" in text and "is not a regular file" in text


def test_bad_reject_lines_are_one_warning(packed_small: Path) -> None:
    good = [
        {"path": "a/1.png", "reason": "corrupt", "message": "cannot identify image"},
        {"path": "a/2.png", "reason": "corrupt"},
        {"path": "b/3.png", "reason": "too_small", "message": "4x4"},
    ]
    bad = [
        "not json",
        "[1, 2]",
        "[" * 50_000,  # nested too deep for json (and within the line bound)
        '{"path": ' + "9" * 5000 + ', "reason": "x"}',  # past Python's int digits
        '{"path": "c.png", "reason": ["a"]}',
        '{"path": "d.png"}',
        "x" * 300_000,  # a line past the bound is not read whole
    ]
    lines = [json.dumps(good[0]), bad[0], json.dumps(good[1]), *bad[1:], json.dumps(good[2])]
    (packed_small / REJECTS).write_text("\n".join(lines) + "\n")
    _, text = _report_text(packed_small)
    assert "3 rejected inputs, 2 reasons" in text
    assert "<td>corrupt</td><td>a/1.png</td><td>cannot identify image</td>" in text
    assert text.count("not reject records") == 1
    assert "7 lines of rejects.jsonl are not reject records (lines 2, 4, 5, 6, 7 ...)" in text


def test_reject_reasons_and_class_names_with_dollars_are_drawn_as_text(tmp_path: Path) -> None:
    names = ("$\\frac{$", "cost $x^{$ usd")  # mathtext would fail on both
    out = tmp_path / "ds"
    res = invoke("pack", source(tmp_path / "src", names), out, *PACK)
    assert res.exit_code == 0, res.output
    (out / REJECTS).write_text(json.dumps({"path": "p.png", "reason": "$\\sqrt{$"}) + "\n")
    _, text = _report_text(out)
    assert "cost $x^{$ usd" in text and "$\\sqrt{$" in text
    result = TuneResult(tmp_path / "a $\\frac{$ folder", 8, 4, 2, ("image",), 4, 100)
    result.rows = [TuneRow(0, 100.0, 100.0, 1, 0)]
    plot(result, tmp_path / "tune.png")  # its title holds the dataset's folder name
    assert Image.open(tmp_path / "tune.png").size == (640, 400)


# -- odd extra values: one line, never a traceback ----------------------------------------------


@pytest.mark.parametrize(
    "stats",
    [
        "x",
        {"sizes": "x"},
        {"sizes": {"8": "x"}},
        {"sizes": {"8": {"mean": "abc", "std": [1, 2, 3]}}},
        {"sizes": {"8": {"mean": [1, "a", None], "std": [{}], "pixels": "many"}}},
        {"sizes": {"8": {"mean": [1.0] * 40, "std": [1.0] * 40}}},
    ],
)
def test_malformed_image_stats_report(packed_small: Path, stats: Any) -> None:
    edit_manifest(packed_small, lambda d: d["extra"].update(stats=stats))
    res = invoke("report", packed_small, "-n", "1", "-q")
    one_line(res)
    if res.exit_code == 0:  # the page says so where the loader has not refused it already
        assert "pixel statistics" in (packed_small / "report.html").read_text().lower()
    else:
        assert res.exit_code == 1 and res.output.startswith("error:") and "stats" in res.output


ODD_AUDIO = [
    {"rate": "fast"},
    {"channels": 0},
    {"channels": "x"},
    {"seconds": "long"},
    {"max_seconds": "y"},
    {"rate": float("nan")},
    {"rate": -5, "channels": 1e9},
    {"rate": float("inf"), "seconds": float("inf")},
    {"rate": True, "resampler": ["a"]},
]


LEGACY = Path(__file__).parent / "legacy" / "packed"  # format version 3 keeps extra.audio


@pytest.fixture(scope="module")
def audio_ds() -> Path:
    return LEGACY / "audio"


@pytest.mark.parametrize("odd", ODD_AUDIO, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_info_and_report_of_audio_with_odd_extra(
    tmp_path: Path, audio_ds: Path, odd: dict[str, Any]
) -> None:
    root = edit_manifest(
        shutil.copytree(audio_ds, tmp_path / "a"), lambda d: d["extra"]["audio"].update(odd)
    )
    for res in (invoke("info", root), invoke("report", root, "-q")):
        one_line(res)
        assert res.exit_code in (0, 1), res.output
        if res.exit_code == 1:  # refused by the loader's check of extra.audio
            assert res.output.startswith("error:") and "audio" in res.output
    if (root / "report.html").exists():
        text = (root / "report.html").read_text()
        assert "9 clips" in text  # the clips are counted from the offsets whatever extra says


ODD_VIDEO = [
    {"fps": "fast"},
    {"frames": "x", "seconds": "long"},
    {"max_frames": "y", "size": None},
    {"fps": float("nan"), "frames": -1},
    {"fps": True, "seconds": float("inf")},
]


@pytest.fixture(scope="module")
def video_ds() -> Path:
    return LEGACY / "video-jpeg"


@pytest.mark.parametrize("odd", ODD_VIDEO, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_info_and_report_of_video_with_odd_extra(
    tmp_path: Path, video_ds: Path, odd: dict[str, Any]
) -> None:
    root = edit_manifest(
        shutil.copytree(video_ds, tmp_path / "v"), lambda d: d["extra"]["video"].update(odd)
    )
    for res in (invoke("info", root), invoke("report", root, "-n", "1", "-q")):
        one_line(res)
        assert res.exit_code in (0, 1), res.output
        if res.exit_code == 1:
            assert res.output.startswith("error:") and "video" in res.output
    res = invoke("info", root)
    if res.exit_code == 0:
        assert "frames: 4 videos" in res.output


@pytest.mark.parametrize(
    "content",
    ['{"chars": [1, 2]}', '{"chars": ' + "[" * 100_000 + "]" * 100_000 + "}", "[1]", "not json"],
)
def test_report_of_tokens_with_a_broken_char_tokenizer(tmp_path: Path, content: str) -> None:
    import hashlib

    root = shutil.copytree(LEGACY / "tokens-char", tmp_path / "tok")  # version 2: extra.tokenizer
    (root / "chars.json").write_text(content)
    digest = hashlib.sha256(content.encode()).hexdigest()
    tok = {"name": "char", "file": "chars.json", "sha256": digest}
    edit_manifest(root, lambda d: d["extra"].update(tokenizer=tok))
    _, text = _report_text(root)
    assert "most common tokens" in text and re.search(r"<td>(\d+)</td><td>id \1</td>", text)
    assert text.count("tokenizer") >= 1 and "cannot be read" in text


def _char_tokens(tmp_path: Path) -> Path:
    """Three documents tokenized by characters, one split."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"{i}.txt").write_text("abcab " * (i + 1) + "z")
    out = tmp_path / "tok"
    res = invoke("tokenize", src, out, "-t", "char", "--val-fraction", "0", "-j", "1", "-q")
    assert res.exit_code == 0, res.output
    return out


def _common(text: str) -> list[tuple[int, str, int]]:
    """The report's most common tokens: (id, text, count)."""
    rows = re.findall(r"<tr><td>(\d+)</td><td>([^<]*)</td><td>([\d,]+)</td><td>[\d.]+%", text)
    return [(int(i), t, int(n.replace(",", ""))) for i, t, n in rows]


def test_report_of_tokens_counts_ids_not_the_declared_vocabulary(tmp_path: Path) -> None:
    """A vocab_size of 2**32 (which uint32 ids allow) made the report allocate a count for each
    id: 32 GiB, a MemoryError. Its table is the one an exact count of the ids gives."""
    root = _char_tokens(tmp_path)
    ids = np.concatenate([np.load(p) for p in sorted(root.glob("tokens-train-*.npy"))])
    eot = json.loads((root / "manifest.json").read_text())["fields"]["tokens"]["eot_id"]
    counted = Counter(ids.tolist())
    del counted[eot]
    _, text = _report_text(root)
    assert {(i, n) for i, _, n in _common(text)} == set(counted.items())
    assert {t for _, t, _ in _common(text)} == {"&#x27;" + c + "&#x27;" for c in "abc z"}
    edit_manifest(root, lambda d: d["fields"]["tokens"].update(vocab_size=2**32))
    res, again = _report_text(root)
    assert res.exit_code == 0 and _common(again) == _common(text)


@pytest.mark.parametrize("where", ["../outside/chars.json", "OUTSIDE", "a link"])
def test_report_of_tokens_reads_no_tokenizer_outside_the_dataset(
    tmp_path: Path, where: str
) -> None:
    """A tokenizer file named outside the dataset (a .. path, an absolute one, a link out) was
    opened to decode the commonest tokens: ids are shown instead."""
    root = _char_tokens(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(root / "chars.json", outside / "chars.json")  # a tokenizer that would decode
    if where == "a link":
        (root / "chars.json").unlink()
        (root / "chars.json").symlink_to(outside / "chars.json")
    else:
        said = str(outside / "chars.json") if where == "OUTSIDE" else where
        edit_manifest(root, lambda d: d["fields"]["tokens"].update(tokenizer=said))
    _, text = _report_text(root)
    assert _common(text) and all(t == f"id {i}" for i, t, _ in _common(text))
    assert "cannot be read" in text


# -- papercut: a visually blank image is blank ---------------------------------------------------


def test_near_uniform_images_count_as_blank(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    for i in range(3):  # what transparent PNGs on white pack to: 253-255 everywhere
        Image.fromarray(rng.integers(253, 256, (16, 16, 3), dtype=np.uint8)).save(src / f"{i}.png")
    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(src / "noise.png")
    out = tmp_path / "ds"
    assert invoke("pack", tmp_path / "src", out, "--sizes", "16", "-q").exit_code == 0
    res = invoke("preview", out, "-o", tmp_path / "s.png")
    assert res.exit_code == 0 and "3 of 4 look blank" in res.output, res.output
