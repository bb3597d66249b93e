"""Values a reader trusts and `prep verify` once passed (issue 34 items 17 and 18): Json samples
that are no JSON (text, 100,000-deep nesting, a 5000-digit integer, NaN, over 1 MiB), Text
samples that are no UTF-8, keep-mode instance masks a byte short. Verify names the sample; the
reader raises one FormatError naming it, never a traceback."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import untrusted
from typer.testing import CliRunner

import prep
from loaders import CenterCrop, SampleDataset
from loaders.fields import checks
from loaders.format import FormatError, read_manifest
from loaders.format.arrays import Layout
from prep.cli.main import app
from prep.fields import Boxes, Image, Instances, Json, Text


def verify(root: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["verify", str(root)])
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def put_ragged(root: Path, name: str, samples: list[bytes]) -> None:
    """Shard 0's ragged uint8 array `name` holds `samples` now, its offsets, lengths and
    checksums made to agree (a careful tamperer)."""
    data = np.frombuffer(b"".join(samples), np.uint8)
    off = np.cumsum([0, *map(len, samples)]).astype(np.int64)
    untrusted.rewrite(root, f"{name}-00000.npy", data)
    untrusted.rewrite(root, f"{name}-offsets-00000.npy", off)
    untrusted.edit_manifest(root, lambda m: m["shards"][0]["arrays"][name].update(length=len(data)))


@pytest.fixture
def texts(tmp_path: Path) -> Path:
    rows = [{"t": f"café {i}", "j": {"id": i, "tags": ["a"] * i}} for i in range(3)]
    fields = {"t": Text(), "j": Json()}
    prep.pack_samples(lambda r: r, rows, tmp_path / "ds", fields, show_progress=False, jobs=1)
    assert verify(tmp_path / "ds")[0] == 0
    return tmp_path / "ds"


GOOD = [json.dumps({"id": i}).encode() for i in range(3)]
NOT_JSON = [
    (b"{'id': 1}", "Expecting property name"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deep for JSON"),
    (b"1" * 5000, "Exceeds the limit (4300 digits)"),
    (b"[NaN]", "NaN is not JSON"),
    (b"", "Expecting value"),
    (b'"\xff"', "not UTF-8"),
]


@pytest.mark.parametrize("value, why", NOT_JSON)
def test_a_json_sample_that_is_no_json(texts: Path, value: bytes, why: str) -> None:
    put_ragged(texts, "j", [GOOD[0], value, GOOD[2]])
    ds = SampleDataset(texts)  # opening reads offsets, never every value
    assert ds.__getitems__([0, 2])["j"] == [{"id": 0}, {"id": 2}]
    with pytest.raises(FormatError, match=r"j-00000.npy \(shard 0, sample 1\): field j is not"):
        ds.__getitems__([0, 1])
    code, out = verify(texts)
    utf8 = why == "not UTF-8"
    said = "sample 1 of j is not UTF-8" if utf8 else "sample 1 of j is not JSON"
    assert code == 1 and said in out and "j-00000.npy" in out, out
    assert utf8 or why in out


def test_a_json_sample_over_1_mib_is_a_verify_problem(texts: Path) -> None:
    put_ragged(texts, "j", [GOOD[0], GOOD[1], b'"' + b"a" * (1 << 20) + b'"'])
    code, out = verify(texts)
    assert code == 1 and "sample 2 of j holds 1,048,578 bytes of JSON; at most 1 MiB" in out


def test_a_text_sample_that_is_no_utf8_is_a_verify_problem(texts: Path) -> None:
    put_ragged(texts, "t", ["é".encode(), b"ok \xe9 no", b"\xc3"])  # Latin-1, then a cut char
    assert SampleDataset(texts, ("t",)).__getitems__([1])["t"] == ["ok \ufffd no"]  # bit rot
    code, out = verify(texts)
    assert code == 1 and "sample 1 of t is not UTF-8 (invalid continuation byte)" in out, out


def test_text_is_checked_in_bounded_blocks(tmp_path: Path, monkeypatch: Any) -> None:
    """Samples longer than a block are read in parts, a character split between two parts
    included; a bad byte is found in any part, and samples of 0 bytes pass."""
    monkeypatch.setattr(checks, "CHUNK_BYTES", 5)
    samples = ["", "ééééé", "a", "bcd€€", ""]
    data = "".join(samples).encode()
    path = tmp_path / "t.npy"
    np.save(path, np.frombuffer(data, np.uint8))
    layout: Layout = (128, np.dtype(np.uint8), (len(data),))
    off = np.cumsum([0, *(len(s.encode()) for s in samples)])
    assert checks.string_problem("t", path, layout, off, json=False) is None
    np.save(path, np.frombuffer(data[:-1] + b"\xff", np.uint8))  # the last € broken
    said = checks.string_problem("t", path, layout, off, json=False)
    assert said is not None and "sample 3 of t is not UTF-8" in said


@pytest.fixture
def instances(tmp_path: Path) -> Path:
    """Keep mode: 3 images of their own shapes, 2 instance masks each."""

    def make(i: int) -> dict[str, Any]:
        h, w = 20 + 4 * i, 30
        stack = np.zeros((2, h, w), np.uint8)
        stack[0, 2:10, 3:12], stack[1, 5:, 20:] = 1, 1
        boxes = np.array([[3, 2, 12, 10], [20, 5, 30, h]], np.float32)
        return {"image": np.full((h, w, 3), 50 * i, np.uint8), "boxes": boxes, "inst": stack}

    fields = {
        "image": Image(sizes=(32,), mode="keep"),
        "boxes": Boxes("image"),
        "inst": Instances("image"),
    }
    prep.pack_samples(make, range(3), tmp_path / "ds", fields, show_progress=False, jobs=1)
    assert verify(tmp_path / "ds")[0] == 0
    return tmp_path / "ds"


def test_keep_mode_instances_a_byte_short_are_refused_at_open(instances: Path) -> None:
    data = np.load(instances / "inst_32-00000.npy")
    off = np.load(instances / "inst_32-offsets-00000.npy")
    pieces = [data[a:b].tobytes() for a, b in itertools.pairwise(off.tolist())]
    put_ragged(instances, "inst_32", [*pieces[:-1], pieces[-1][:-1]])  # the last one short
    with pytest.raises(FormatError, match="a sample of inst at 32 is not whole masks"):
        SampleDataset(instances, ("inst", "boxes"))
    code, out = verify(instances)
    assert code == 1 and "a sample of inst at 32 is not whole masks of its image's size" in out


def test_instances_changed_after_open_are_a_format_error(instances: Path) -> None:
    """The reader's own check: offsets rewritten in place (same bytes) once the dataset is
    open, so that a sample ends a byte early and the next starts a byte early."""
    ds = SampleDataset(instances, ("inst", "boxes"), crop=CenterCrop(16))
    assert [len(m) for m in ds.__getitems__([0, 1, 2])["inst"]] == [2, 2, 2]
    path = instances / "inst_32-offsets-00000.npy"
    off = np.load(path)
    off[1] -= 1
    fresh = SampleDataset(instances, ("inst", "boxes"), crop=CenterCrop(16))  # opened before
    np.save(path, off)  # the same size: a map made now reads the new offsets
    assert read_manifest(instances).shards[0].arrays["inst_32"].offsets is not None
    with pytest.raises(FormatError, match=r"inst_32-00000.npy \(shard 0, sample 0\): field inst"):
        fresh.__getitems__([0])
