"""Looking at packed datasets: preview (contact sheet), tune (loader workers), verify --limit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from loaders import ImageShardDataset
from loaders.fields.drawing import PALETTE
from loaders.format import read_manifest
from prep import PrepError
from prep.cli.main import app
from prep.inspect.preview import GAP, preview
from prep.inspect.report import verify
from prep.inspect.tune import (
    TuneResult,
    TuneRow,
    batch_bytes,
    check_plot,
    cpu_seconds,
    plot,
    thread_counts,
    tune,
    worker_counts,
)


def _stored(root: Path, name: str, i: int, shard_size: int = 8) -> np.ndarray:
    shard, local = divmod(i, shard_size)
    return np.load(root / f"{name}-{shard:05d}.npy")[local]


# -- preview ---------------------------------------------------------------------------------


def test_preview_sheet_size_and_tiles(packed: Path, tmp_path: Path) -> None:
    out = tmp_path / "sheet.png"
    res = preview(packed, size=64, count=10, output=out, columns=4)
    sheet = np.asarray(Image.open(out).convert("RGB"))
    layout = res.layout
    assert (layout.columns, layout.rows) == (4, 3)
    assert sheet.shape[1] == GAP + 4 * (64 + GAP)  # 4 tiles of 64 px and their gaps
    assert (sheet.shape[1], sheet.shape[0]) == layout.size
    # Sample 9 sits in row 2, column 1.
    x, y = layout.origin(9)
    assert x == GAP + 1 * (64 + GAP)
    assert y == layout.header + 2 * (64 + layout.caption + GAP)
    tile = sheet[y : y + 64, x : x + 64].astype(int)
    image = _stored(packed, "image_64", 9).astype(int)
    mask = _stored(packed, "mask_64", 9)
    assert mask.any() and not mask.all()
    background = mask == 0
    assert np.array_equal(tile[background], image[background])  # the stored pixels, untouched
    # Masked pixels moved towards their class colour.
    colour = PALETTE[(mask[~background].astype(int) - 1) % len(PALETTE)]
    before = np.abs(image[~background] - colour).sum()
    after = np.abs(tile[~background] - colour).sum()
    assert after < 0.7 * before


def test_preview_without_masks_shows_stored_pixels(packed: Path, tmp_path: Path) -> None:
    res = preview(packed, size=96, count=3, output=tmp_path / "s.png", masks=False)
    sheet = np.asarray(Image.open(tmp_path / "s.png").convert("RGB"))
    for i in range(3):
        x, y = res.layout.origin(i)
        assert np.array_equal(sheet[y : y + 96, x : x + 96], _stored(packed, "image_96", i))
    assert not res.masks


def test_preview_gray_tiles(raw_demo: Path, tmp_path: Path, pack_to) -> None:
    gray = tmp_path / "gray"
    pack_to(raw_demo / "images", gray, sizes=[16], gray=True, limit=2)
    res = preview(gray, count=5, output=tmp_path / "g.png")
    assert res.tiles == 2 and res.size == 16  # count capped at the dataset
    sheet = np.asarray(Image.open(tmp_path / "g.png").convert("RGB"))
    x, y = res.layout.origin(1)
    stored = np.load(gray / "image_16-00000.npy")[1]  # (16, 16, 1)
    assert np.array_equal(sheet[y : y + 16, x : x + 16], np.repeat(stored, 3, axis=2))


def test_cli_preview_and_its_errors(packed: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "docs" / "sheet.png"
    result = runner.invoke(app, ["preview", str(packed), "--limit", "4", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "4 samples at 64 px" in result.output and Image.open(out).format == "PNG"
    bad = runner.invoke(app, ["preview", str(packed), "--size", "50", "-o", str(out)])
    assert bad.exit_code == 1 and "HINT: --size one of [64, 96]" in bad.output


# -- tune ------------------------------------------------------------------------------------


def test_worker_counts() -> None:
    assert worker_counts(1) == [0, 1]
    assert worker_counts(4) == [0, 1, 2, 3, 4]
    assert worker_counts(64) == [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert worker_counts(20) == [0, 1, 2, 3, 4, 6, 8, 12, 16, 20]


def test_tune_rows_and_ram_is_the_arithmetic(packed: Path) -> None:
    res = tune(packed, size=64, batch_size=4, seconds=0.2, show_progress=False)
    threads = thread_counts(os.cpu_count() or 1)  # first, then the worker counts
    assert [r.threads for r in res.rows[: len(threads)]] == threads
    assert [r.workers for r in res.rows[len(threads) :]] == worker_counts(os.cpu_count() or 1)
    assert res.recommended.overlaps  # threads and workers were tried: never in the step
    # image 64x64x3 uint8 + mask 64x64 uint8 + label int64, four samples a batch
    per_batch = (64 * 64 * 3 + 64 * 64 + 8) * 4
    assert res.batch_bytes == per_batch
    for r in res.rows:
        # workers x prefetch_factor; threads + 1; in the step, one
        in_flight = r.workers * 2 if r.workers else r.threads + 1
        assert r.batches_in_flight == in_flight
        assert r.ram_bytes == in_flight * per_batch
        assert r.samples_per_s > 0 and r.cpu_percent > 0
    # The arithmetic counts what the loader really returns.
    ds = ImageShardDataset(packed, size=64, fields=res.fields)
    assert sum(t.nbytes for t in ds.__getitems__([0, 1, 2, 3]).tensors) == per_batch


def test_cpu_seconds_count_live_children() -> None:
    """A child that is still running counts (os.times would wait for it to end)."""
    script = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
    child = subprocess.Popen([sys.executable, "-c", script + "time.sleep(30)"])
    try:
        before = cpu_seconds()
        time.sleep(1.5)  # the child burns 0.5 s of CPU, then sleeps; this process idles
        assert cpu_seconds() - before > 0.3
    finally:
        child.kill()
        child.wait()


def _row(workers: int, rate: float) -> TuneRow:
    return TuneRow(workers, rate, 100.0, max(1, 2 * workers), 0)


@pytest.mark.parametrize(
    ("rates", "best", "recommended"),
    [
        # the fastest setting with workers is 3; 2 is within 10% of it; 0 is fastest but loads
        # in the training step's own time, so it is never counted when workers were tried
        ({0: 9000, 1: 1000, 2: 1900, 3: 2000, 4: 1500}, 3, 2),
        ({0: 10000, 1: 10}, 1, 1),
        ({0: 500}, 0, 0),  # only 0 tried: it is the only candidate
        ({1: 900, 2: 1000}, 2, 1),  # exactly 90% of the best is near enough
        ({1: 899, 2: 1000}, 2, 2),  # just under is not
        ({1: 950, 2: 500, 4: 1000}, 4, 1),  # any count near the best, not only its neighbours
        ({4: 1000, 2: 950, 3: 990}, 4, 2),  # rows in any order
        ({1: 1000, 2: 800, 3: 990}, 1, 1),  # the fastest is also the fewest
    ],
)
def test_recommendation_is_the_fewest_workers_within_10_percent_of_the_best(
    packed: Path, rates: dict[int, float], best: int, recommended: int
) -> None:
    res = TuneResult(packed, 64, 4, 2, ("image",), 24, 100)
    res.rows = [_row(w, rate) for w, rate in rates.items()]
    assert (res.best.workers, res.recommended.workers) == (best, recommended)
    assert f"recommended: num_workers={recommended}," in res.advice()


def test_advice_explains_zero_workers_and_cpu_bound(packed: Path) -> None:
    res = TuneResult(packed, 64, 4, 2, ("image",), 24, 100)
    res.rows = [_row(0, 8000), _row(1, 1000), _row(2, 1900)]
    advice = res.advice()
    assert "still grows at the most workers tried" in advice  # best at the most workers
    assert "adds 0.5 ms to every training step" in advice  # 4 samples at 8000/s
    for rates in ((2000, 1900), (1000, 1050)):  # the most workers are not faster by 10%
        res.rows = [_row(0, 8000), _row(1, rates[0]), _row(2, rates[1])]
        assert "still grows" not in res.advice()


def test_batch_bytes_without_masks(raw_demo: Path, tmp_path: Path, pack_to) -> None:
    plain = tmp_path / "plain"
    pack_to(raw_demo / "images", plain, sizes=[8, 16], limit=2)
    m = read_manifest(plain)
    assert batch_bytes(m, 16, ("image", "label"), 10) == (16 * 16 * 3 + 8) * 10


def test_cli_tune_limit_and_plot(packed: Path, tmp_path: Path) -> None:
    png = tmp_path / "tune.png"
    args = ["tune", str(packed), "--workers", "0,1", "--seconds", "0.2", "-b", "4"]
    result = CliRunner().invoke(app, [*args, "--limit", "6", "--plot", str(png), "-q"])
    assert result.exit_code == 0, result.output
    assert "6 samples at 64 px" in result.output
    # The fastest of 1 (or 2) threads and 1 worker: threads when within 10% of it.
    assert re.search(r"recommended: num_workers=(1, prefetch|0, threads=[12],)", result.output)
    assert Image.open(png).size == (640, 400)
    bad = CliRunner().invoke(app, ["tune", str(packed), "--workers", "a,b"])
    assert bad.exit_code != 0 and "not a list of counts" in bad.output


def test_plot_marks_the_recommended_point(packed: Path, tmp_path: Path) -> None:
    res = TuneResult(packed, 64, 4, 2, ("image",), 24, 100)
    res.rows = [_row(0, 100), _row(1, 300), _row(2, 310)]
    plot(res, tmp_path / "p.png")
    image = Image.open(tmp_path / "p.png")
    assert (image.format, image.size) == ("PNG", (640, 400))
    pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    orange = np.all(pixels == (255, 127, 14), axis=1).sum()  # matplotlib's tab:orange
    assert orange > 50  # the recommended dot (and its label) are drawn in orange
    res.rows = [_row(0, 100)]  # nothing recommended in orange but the one point
    plot(res, tmp_path / "q.png")


def test_plot_without_matplotlib_is_one_line_with_a_hint(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(PrepError, match=r"HINT: pip install 'prep\[plot\]'"):
        check_plot()
    args = ["tune", str(packed), "--workers", "0", "--seconds", "0.1", "-q"]
    result = CliRunner().invoke(app, [*args, "--plot", str(tmp_path / "t.png")])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1].startswith("error: --plot needs matplotlib")
    assert "recommended" not in result.output  # refused before the timed run
    assert not (tmp_path / "t.png").exists()


# -- verify --limit, imports -------------------------------------------------------------------


def test_verify_limit_checks_only_the_first_shards(packed: Path, copy_dataset) -> None:
    ds = copy_dataset(packed)
    bad = ds / "image_64-00002.npy"  # the third shard: samples 16-23
    data = bytearray(bad.read_bytes())
    data[-1] ^= 0xFF
    bad.write_bytes(bytes(data))
    m, problems = verify(ds, limit=16)
    assert len(m.shards) == 2 and problems == []
    m, problems = verify(ds, limit=17)
    assert len(m.shards) == 3 and len(problems) == 1 and "image_64-00002.npy" in problems[0]
    result = CliRunner().invoke(app, ["verify", str(ds), "--limit", "9"])
    assert result.exit_code == 0 and "16 samples" in result.output


def test_report_modules_do_not_import_torch() -> None:
    code = (
        "import sys, prep.cli.main, prep.inspect.preview, prep.inspect.tune, prep.run.profile; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("count", [0, -1])
def test_preview_rejects_empty_counts(packed: Path, tmp_path: Path, count: int) -> None:
    result = CliRunner().invoke(app, ["preview", str(packed), "-n", str(count)])
    assert result.exit_code == 1 and "at least 1" in result.output


def test_bad_output_paths_are_one_line(packed: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from prep.cli.main import app

    runner = CliRunner()
    for args in (
        ["preview", str(packed), "-o", str(tmp_path / "sheet.foo")],
        ["tune", str(packed), "--seconds", "0.1", "--workers", "0", "--plot", "/proc/x.png"],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 1 and "HINT: a writable path" in res.output, res.output
