"""prep import webdataset: tars the real `webdataset` package writes read back key for key as
WebDataset reads them; a truncated tar and a sample missing a field are rejects; nothing is
ever written outside OUT."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from loaders import SampleDataset
from loaders.format import read_manifest
from prep.cli.main import app
from prep.kinds.importers.tars import expand
from prep.kinds.importers.wds import WdsConfig, import_webdataset

wds = pytest.importorskip("webdataset")

RNG = np.random.default_rng(0)
N_TARS, PER_TAR = 3, 4


def sample(i: int) -> dict[str, Any]:
    return {
        "__key__": f"s{i:04d}",
        "png": (RNG.random((16, 16, 3)) * 255).astype(np.uint8),
        "cls": i % 5,
        "txt": f"caption {i} — é",
        "json": {"id": i, "tags": ["a"] * (i % 2)},
        "npy": np.arange(3 * (i % 3), dtype=np.float32).reshape(-1, 3),  # ragged rows
        "emb.npy": np.full((4,), i, np.int16),  # fixed
        "bin": bytes([i, 0, 255]),
    }


def write_tars(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for t in range(N_TARS):
        paths.append(folder / f"train-{t:06d}.tar")
        with wds.TarWriter(str(paths[-1])) as w:
            for i in range(t * PER_TAR, (t + 1) * PER_TAR):
                w.write(sample(i))
    return paths


@pytest.fixture(scope="module")
def tars(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_tars(tmp_path_factory.mktemp("wds") / "shards")


def imported(src: str, out: Path, **kw: Any) -> Any:
    kw = {"sizes": [16], "jobs": 1, **kw}
    return import_webdataset(WdsConfig(src=src, out=str(out), **kw), show_progress=False)


def test_every_key_round_trips(tars: list[Path], tmp_path: Path) -> None:
    pattern = str(tars[0].parent / "train-{000000..000002}.tar")
    imported(pattern, tmp_path / "ds", shard_size=5)
    ds = SampleDataset(tmp_path / "ds", ragged="list")
    source = list(wds.WebDataset(pattern, shardshuffle=False))  # raw bytes a key
    assert len(ds) == len(source) == N_TARS * PER_TAR
    b = ds.__getitems__(list(range(len(ds))))
    for j, s in enumerate(source):
        assert b["__key__"][j] == s["__key__"]
        assert b["source"][j] == f"train-{j // PER_TAR:06d}.tar:{s['__key__']}"  # tar and key
        png = np.asarray(PILImage.open(io.BytesIO(s["png"])).convert("RGB"))
        assert np.array_equal(b["image"][j].permute(1, 2, 0).numpy(), png)
        assert b["cls"][j] == int(s["cls"]) and b["txt"][j] == s["txt"].decode()
        assert b["json"][j] == json.loads(s["json"]) and b["bin"][j] == s["bin"]
        assert np.array_equal(b["npy"][j].numpy(), np.load(io.BytesIO(s["npy"])))
        assert np.array_equal(b["emb_npy"][j].numpy(), np.load(io.BytesIO(s["emb.npy"])))
    m = read_manifest(tmp_path / "ds")
    fields = m.fields
    assert fields["npy"]["shape"] == [None, 3] and fields["emb_npy"]["shape"] == [4]
    assert {fields[f]["kind"] for f in ("image", "cls", "txt", "json", "bin")} == {
        "image",
        "label",
        "text",
        "json",
        "bytes",
    }
    assert m.extra["webdataset"]["fields"]["emb_npy"] == "emb.npy"
    assert m.extra["webdataset"]["fields"]["image"] == "png"  # the field says which member


def test_truncated_tar_and_missing_field_are_rejects(tars: list[Path], tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    data = tars[0].read_bytes()
    with tarfile.open(tars[0]) as t:
        last = [m for m in t if m.name.startswith("s0003.")][-1]
    (src / "a.tar").write_bytes(data[: last.offset_data + 5])  # cut inside the last sample
    with wds.TarWriter(str(src / "b.tar")) as w:
        w.write({"__key__": "k0", "cls": 1, "txt": "x"})
        w.write({"__key__": "k1", "cls": 2})  # no txt
    args = ["webdataset", str(src), str(tmp_path / "ds"), "--fields", "cls,txt", "-q"]
    res = CliRunner().invoke(app, ["import", *args, "--max-rejects", "0.5"])
    assert res.exit_code == 0, res.output
    rejects = [json.loads(x) for x in (tmp_path / "ds" / "rejects.jsonl").read_text().splitlines()]
    got = sorted((r["path"].rsplit("/", 1)[-1], r["reason"]) for r in rejects)
    assert got == [("a.tar:s0003", "truncated_tar"), ("b.tar:k1", "field_missing")]
    ds = SampleDataset(tmp_path / "ds")
    assert ds.__getitems__(list(range(len(ds))))["__key__"] == ["s0000", "s0001", "s0002", "k0"]


def test_nothing_is_extracted_and_a_url_reads(tmp_path: Path) -> None:
    """Members named ../x or /x are read in memory: no file appears outside OUT."""
    tar = tmp_path / "evil.tar"
    with tarfile.open(tar, "w") as t:
        for name in ("../../escape.txt", "/tmp/abs_escape.txt", "ok.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            t.addfile(info, io.BytesIO(b"hi"))
    res = CliRunner().invoke(
        app, ["import", "webdataset", f"file://{tar}", str(tmp_path / "o" / "ds"), "-q"]
    )
    assert res.exit_code == 0, res.output
    assert not (tmp_path.parent.parent / "escape.txt").exists()
    assert not Path("/tmp/abs_escape.txt").exists()
    b = SampleDataset(tmp_path / "o" / "ds").__getitems__([0, 1, 2])
    assert b["__key__"] == ["../../escape", "/tmp/abs_escape", "ok"] and b["txt"] == ["hi"] * 3


def test_bad_sources_exit_with_one_line(tars: list[Path], tmp_path: Path) -> None:
    def run(*args: str) -> Any:
        return CliRunner().invoke(app, ["import", "webdataset", *args, str(tmp_path / "ds")])

    res = run(str(tars[0]), "--fields", "jpg")
    assert res.exit_code == 2 and "no member has extension 'jpg'" in res.output
    res = run(str(tmp_path / "none-{0..1}.tar"))
    assert res.exit_code == 1 and "none-0.tar: no such shard" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_an_extension_most_samples_lack_exits_2_naming_fields(tmp_path: Path) -> None:
    with wds.TarWriter(str(tmp_path / "opt.tar")) as w:
        for i in range(4):
            w.write({"__key__": f"k{i}", "cls": i, "txt": "x", **({"json": {}} if i else {})})
            w.write({"__key__": f"r{i}", "cls": i, "txt": "y"})  # no .json: 5 of 8 lack it
    args = ["import", "webdataset", str(tmp_path / "opt.tar"), str(tmp_path / "ds"), "-q"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "extension 'json' is in 3 of 8 samples" in res.output
    assert "--fields 'cls,txt' leaves it out" in res.output
    res = CliRunner().invoke(app, [*args, "--fields", "cls,txt"])
    assert res.exit_code == 0 and len(SampleDataset(tmp_path / "ds")) == 8, res.output
    res = CliRunner().invoke(app, [*args, "--max-rejects", "0.7", "--overwrite"])
    assert res.exit_code == 0 and len(SampleDataset(tmp_path / "ds")) == 3, res.output


def test_brace_expansion() -> None:
    assert expand("a/{0..2}.tar") == ["a/0.tar", "a/1.tar", "a/2.tar"]
    assert expand("x-{000008..000010}") == ["x-000008", "x-000009", "x-000010"]
    assert expand("{train,val}-{0..1}.tar") == [
        "train-0.tar",
        "train-1.tar",
        "val-0.tar",
        "val-1.tar",
    ]
    assert expand("plain.tar") == ["plain.tar"]


def test_gzipped_and_rewritten_tars_read_as_they_are_now(tmp_path: Path) -> None:
    """A .tar.gz reads like a .tar; a tar rewritten between two imports in one process is read
    anew (no handle of the earlier run is reused)."""
    for text in ("one", "two"):
        with tarfile.open(tmp_path / "a.tar.gz", "w:gz") as t:
            for key in ("k0", "k1"):
                info = tarfile.TarInfo(f"{key}.txt")
                data = f"{text} {key}".encode()
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        imported(str(tmp_path / "a.tar.gz"), tmp_path / "ds", overwrite=True)
        ds = SampleDataset(tmp_path / "ds")
        assert ds.__getitems__([0, 1])["txt"] == [f"{text} k0", f"{text} k1"]


def test_mixed_jpg_and_png_samples_are_one_image_field(tmp_path: Path) -> None:
    """Some samples .jpg, others .png: one field, "image", of whichever the sample has (as
    WebDataset's "jpg;png"); the pixels as PIL decodes each member."""
    pixels = [(RNG.random((16, 16, 3)) * 255).astype(np.uint8) for _ in range(4)]
    with wds.TarWriter(str(tmp_path / "mixed.tar")) as w:
        for i, px in enumerate(pixels):
            w.write({"__key__": f"m{i}", "jpg" if i % 2 else "png": px, "cls": i})
    imported(str(tmp_path / "mixed.tar"), tmp_path / "ds")
    ds = SampleDataset(tmp_path / "ds")
    assert sorted(ds.declared) == ["__key__", "cls", "image", "source"]
    assert read_manifest(tmp_path / "ds").extra["webdataset"]["fields"]["image"] == "jpg;png"
    b = ds.__getitems__([0, 1, 2, 3])
    for i, s in enumerate(wds.WebDataset(str(tmp_path / "mixed.tar"), shardshuffle=False)):
        member = s.get("png", s.get("jpg"))
        want = np.asarray(PILImage.open(io.BytesIO(member)).convert("RGB"))
        assert np.array_equal(b["image"][i].permute(1, 2, 0).numpy(), want)
    imported(str(tmp_path / "mixed.tar"), tmp_path / "ds2", fields="png;jpg,cls")
    assert sorted(SampleDataset(tmp_path / "ds2").declared) == ["__key__", "cls", "image", "source"]


def test_the_image_field_is_image_whatever_the_extension(tmp_path: Path) -> None:
    """All .jpg, all .png, or a mix: the loader reads `image` each time (the manifest says
    which extensions it holds); --fields jpg names it `image` too."""
    px = (RNG.random((16, 16, 3)) * 255).astype(np.uint8)
    for ext in ("jpg", "png"):
        with wds.TarWriter(str(tmp_path / f"{ext}.tar")) as w:
            for i in range(2):
                w.write({"__key__": f"k{i}", ext: px, "cls": i})
        imported(str(tmp_path / f"{ext}.tar"), tmp_path / ext)
        ds = SampleDataset(tmp_path / ext)
        assert sorted(ds.declared) == ["__key__", "cls", "image", "source"]
        assert read_manifest(tmp_path / ext).extra["webdataset"]["fields"]["image"] == ext
        assert ds.__getitems__([0, 1])["image"].shape == (2, 3, 16, 16)
    imported(str(tmp_path / "jpg.tar"), tmp_path / "only", fields="jpg")
    assert sorted(SampleDataset(tmp_path / "only").declared) == ["__key__", "image", "source"]


def test_an_unquoted_brace_pattern_says_to_quote_it(tars: list[Path], tmp_path: Path) -> None:
    """`train-{000000..000002}.tar` unquoted: the shell gives prep three tars and OUT (or, for
    two shards and no OUT, two tars): one line saying to quote the pattern, exit 2."""
    out = str(tmp_path / "ds")
    for args in ([*map(str, tars), out], [str(tars[0]), str(tars[1])]):
        res = CliRunner().invoke(app, ["import", "webdataset", *args])
        assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
        assert res.output.count("\n") == 1 and res.output.startswith("error: "), res.output
        assert "HINT: quote it: prep import webdataset 'shards/train-{" in res.output
    assert not (tmp_path / "ds").exists()


def test_an_npy_claiming_more_than_it_holds_and_deep_json_are_rejects(tmp_path: Path) -> None:
    """A 100-byte .npy whose header claims 25 GB is refused before numpy allocates it; JSON
    nested too deep for the parser is `field_json`: each a reject of its own code."""
    good = io.BytesIO()
    np.save(good, np.zeros((2, 3), np.float32))
    bomb = good.getvalue().replace(b"(2, 3)", b"(2147483648, 3)")
    members = [
        ("a.npy", good.getvalue()), ("a.json", b"{}"),
        ("b.npy", bomb), ("b.json", b"{}"),
        ("c.npy", good.getvalue()), ("c.json", b"[" * 100_000 + b"]" * 100_000),
    ]  # fmt: skip
    with tarfile.open(tmp_path / "t.tar", "w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    imported(str(tmp_path / "t.tar"), tmp_path / "ds", max_rejects=1.0)
    lines = (tmp_path / "ds" / "rejects.jsonl").read_text().splitlines()
    got = {r["path"].rsplit(":", 1)[1]: r["reason"] for r in map(json.loads, lines)}
    assert got == {"b": "field_type", "c": "field_json"}
    assert "claims (2147483648, 3) of float32, more than it holds" in lines[0]
    assert SampleDataset(tmp_path / "ds").__getitems__([0])["__key__"] == ["a"]
