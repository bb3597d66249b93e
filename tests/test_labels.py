"""`prep labels` (issue 39): likely label errors by confident learning, on predictions of a known
accuracy with 5% of labels flipped; against cleanlab's find_label_issues where it is installed
(the dev extra); and the command on a packed dataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loaders import SampleDataset
from prep.cli.main import app
from prep.inspect.labels import label_issues


def noisy_task(
    n: int, k: int, accuracy_scale: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(given labels, out-of-sample probabilities, bool flipped, the probabilities' accuracy):
    logits that favour the true class by `accuracy_scale`, 5% of labels moved to another class."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), true] += accuracy_scale
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    flipped = rng.random(n) < 0.05
    given = true.copy()
    given[flipped] = (true[flipped] + rng.integers(1, k, flipped.sum())) % k
    return given, probs, flipped, float((probs.argmax(axis=1) == true).mean())


# (logit margin, the predictions' accuracy on the true labels, least recall, least precision):
# confident learning finds flips well only from good predictions (docs/quality.md has the table)
GRADES = [(4.0, 0.98, 0.8, 0.9), (3.0, 0.90, 0.75, 0.7)]


@pytest.mark.parametrize(("scale", "accurate", "recall", "precision"), GRADES)
def test_flipped_labels_are_found(
    scale: float, accurate: float, recall: float, precision: float
) -> None:
    given, probs, flipped, accuracy = noisy_task(4000, 10, scale)
    assert abs(accuracy - accurate) < 0.01
    found = label_issues(given, probs)
    hit = (found & flipped).sum()
    got = (hit / flipped.sum(), hit / max(found.sum(), 1))
    assert got[0] >= recall and got[1] >= precision, got


def test_agrees_with_cleanlab() -> None:
    filt = pytest.importorskip("cleanlab.filter")
    for seed, (n, k, scale) in enumerate([(3000, 10, 3.0), (2000, 3, 2.0), (5000, 50, 4.0)]):
        given, probs, _, _ = noisy_task(n, k, scale, seed)
        ours = label_issues(given, probs)
        theirs = filt.find_label_issues(given, probs, n_jobs=1)
        assert np.array_equal(ours, theirs), (
            seed,
            ours.sum(),
            theirs.sum(),
            (ours != theirs).sum(),
        )


def test_float32_memmap_agrees_with_cleanlab(tmp_path: Path) -> None:
    """float32 predictions read from a memory map (as prep labels reads them: thresholds
    compared in float32, only the needed columns gathered) flag as cleanlab does on them."""
    filt = pytest.importorskip("cleanlab.filter")
    given, probs, _, _ = noisy_task(3000, 20, 3.0, seed=5)
    np.save(tmp_path / "p.npy", probs.astype(np.float32))
    mapped = np.load(tmp_path / "p.npy", mmap_mode="r")
    ours = label_issues(given, mapped)
    theirs = filt.find_label_issues(given, np.asarray(mapped), n_jobs=1)
    assert ours.sum() > 50 and np.array_equal(ours, theirs), (ours.sum(), (ours != theirs).sum())


def _planted_predictions(packed: Path, to: Path) -> tuple[np.ndarray, dict[int, int]]:
    """Predictions (saved to `to`) that agree with the stored labels but on two samples, where
    they are sure of another class; (the labels, {sample: the class predicted})."""
    ds = SampleDataset(packed, fields=["label"])
    labels = ds.__getitems__(list(range(len(ds))))["label"].numpy()
    classes = 4
    probs = np.full((len(labels), classes), 0.02)
    probs[np.arange(len(labels)), labels] = 0.94
    wrong = {3: int(labels[3] + 1) % classes, 10: int(labels[10] + 2) % classes}
    for i, c in wrong.items():
        probs[i] = 0.02
        probs[i, c] = 0.94
    np.save(to, probs)
    return labels, wrong


def test_prep_labels_names_the_planted_errors(packed: Path, tmp_path: Path) -> None:
    labels, wrong = _planted_predictions(packed, tmp_path / "preds.npy")
    res = CliRunner().invoke(
        app, ["labels", str(packed), "--predictions", str(tmp_path / "preds.npy"), "--json"]
    )
    assert res.exit_code == 0, res.output
    got = [json.loads(line) for line in res.output.splitlines()]
    names = json.loads((packed / "manifest.json").read_text())["fields"]["label"]["classes"]
    assert {r["index"]: r["suggested"] for r in got} == {i: names[c] for i, c in wrong.items()}
    assert all(r["given"] == names[labels[r["index"]]] for r in got)
    np.save(tmp_path / "short.npy", np.load(tmp_path / "preds.npy")[:5])
    bad = CliRunner().invoke(
        app, ["labels", str(packed), "--predictions", str(tmp_path / "short.npy")]
    )
    assert bad.exit_code != 0 and "short.npy" in bad.output and "Traceback" not in bad.output


def test_report_shows_the_label_errors(packed: Path, tmp_path: Path) -> None:
    labels, wrong = _planted_predictions(packed, tmp_path / "preds.npy")
    out = tmp_path / "report.html"
    args = ["report", str(packed), "--out", str(out), "--predictions", str(tmp_path / "preds.npy")]
    res = CliRunner().invoke(app, [*args, "-n", "1"])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    page = page[page.index("Likely label errors") :]
    assert f"2 of {len(labels)} samples" in page
    names = json.loads((packed / "manifest.json").read_text())["fields"]["label"]["classes"]
    for i, c in wrong.items():
        assert f"{i} {names[labels[i]]} -&gt; {names[c]}" in page


def test_cross_val_writes_out_of_sample_predictions(packed: Path, tmp_path: Path) -> None:
    from examples import train_classifier

    preds = tmp_path / "preds.npy"
    argv = ["--data", str(packed), "--batch-size", "8", "--width", "8", "--workers", "0"]
    argv += ["--crop-scale", "1"]  # the packed images as they are (bench row 39c)
    losses = train_classifier.main(
        [*argv, "--cross-val", "3", "--limit", "2", "--predictions", str(preds)]
    )
    assert len(losses) == 3 * 2  # each fold's model trained its own steps
    probs = np.load(preds)
    assert probs.shape == (24, 4) and np.allclose(probs.sum(axis=1), 1, atol=1e-4)
    res = CliRunner().invoke(app, ["labels", str(packed), "--predictions", str(preds)])
    assert res.exit_code == 0 and "likely label errors" in res.output, res.output


def test_crop_scale_sets_the_examples_random_crop() -> None:
    from examples.train_classifier import augment
    from loaders import transforms as T

    def crops(pipeline: T.Compose) -> list[tuple[float, float]]:
        return [op.scale for op in pipeline.ops if isinstance(op, T.RandomResizedCrop)]

    assert crops(augment(32, 4, "none", 0)) == [(0.35, 1.0)]  # the default
    assert crops(augment(32, 4, "none", 0, crop=0.6)) == [(0.6, 1.0)]
    assert crops(augment(32, 4, "none", 0, crop=1.0)) == []  # none: the images as packed
