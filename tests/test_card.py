"""The dataset card: README.md in the Hugging Face layout, the same for the same dataset (no
time, no machine path), refreshed by an append with the user's license and text kept."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from prep.cli.main import app
from tests.test_append import run_pack, week1, week2


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
    assert 'SampleDataset("pets")' in text
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
