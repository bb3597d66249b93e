"""Samples of any shape: each field kind round-trips, ragged batches by policy, every bad input
a reject naming its field, and the run engine's guarantees (bytes, resume, Dask, a URL OUT)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from typer.testing import CliRunner

import prep
from loaders import CenterCrop, SampleDataset, make_loader
from loaders.format import FormatError, read_manifest
from prep import PrepError, UsageError
from prep.cli.main import app
from prep.fields import Array, Bytes, Image, Json, Label, Mask, Scalar, Text, Tokens
from tests.manifests import edit_manifest

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # loky and Dask workers get make()

RNG = np.random.default_rng(0)
IMAGES = [(RNG.random((40 + 3 * i, 56, 3)) * 255).astype(np.uint8) for i in range(12)]


def ident(x: Any) -> Any:
    return x


def pack(inputs: Any, out: Path, fields: dict[str, Any], make: Any = ident, **kw: Any) -> Any:
    kw.setdefault("jobs", 1)
    return prep.pack_samples(make, inputs, out, fields, show_progress=False, **kw)


def detection(i: int) -> dict[str, Any]:
    if os.environ.get("KILL_AT") == str(i):  # test_resume_after_a_kill...: die mid-run
        os.kill(os.getpid(), signal.SIGKILL)
    n = i % 4  # 0..3 boxes: sample 0 has none
    return {
        "image": IMAGES[i],
        "boxes": np.arange(n * 4, dtype=np.float32).reshape(n, 4) + i,
        "labels": np.arange(n, dtype=np.int64),
        "caption": f"photo {i} — café",
        "meta": {"id": i, "tags": ["a"] * (i % 2)},
    }


DETECTION = {
    "image": Image(sizes=(32,), mode="keep", codec="jpeg"),
    "boxes": Array("float32", (None, 4), finite=True),
    "labels": Array("int64", (None,)),
    "caption": Text(),
    "meta": Json(),
}


@pytest.fixture(scope="module")
def det(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("det") / "ds"
    pack(list(range(12)), out, DETECTION, detection, shard_size=5)
    return out


def test_every_field_kind_round_trips(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "cat": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tok.json"))
    png = io.BytesIO()
    PILImage.fromarray(IMAGES[1]).save(png, format="PNG")
    rows = [
        {
            "vec": np.full((3,), i, np.float32),
            "s": float(i) / 2,
            "y": ["cat", "dog"][i % 2],
            "n": i,
            "t": f"é{i}",
            "b": bytes([i, 0, 255]),
            "j": {"i": i},
            "tok": "a cat dog" if i else "",
            "img": [IMAGES[0], png.getvalue(), PILImage.fromarray(IMAGES[2])][i],
            "m": np.full(IMAGES[[0, 1, 2][i]].shape[:2], i, np.uint8),
        }
        for i in range(3)
    ]
    fields = {
        "vec": Array("float32", (3,)),
        "s": Scalar("float64"),
        "y": Label(("cat", "dog")),
        "n": Label(),
        "t": Text(),
        "b": Bytes(),
        "j": Json(),
        "tok": Tokens(tmp_path / "tok.json"),
        "img": Image(sizes=(16, 24), mode="fit"),
        "m": Mask("img"),
    }
    pack(rows, tmp_path / "ds", fields)
    ds = SampleDataset(tmp_path / "ds", size=24)
    b = ds.__getitems__([0, 1, 2])
    assert b["vec"][:, 0].tolist() == [0, 1, 2] and b["vec"].dtype == torch.float32
    assert b["s"].tolist() == [0, 0.5, 1.0] and b["s"].dtype == torch.float64
    assert b["y"].tolist() == [0, 1, 0] and b["n"].tolist() == [0, 1, 2]
    assert b["t"] == ["é0", "é1", "é2"] and b["b"][2] == bytes([2, 0, 255])
    assert b["j"] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert b["tok"].tolist() == [[0, 0, 0], [1, 2, 0], [1, 2, 0]] and b["tok_len"].tolist() == [
        0,
        3,
        3,
    ]
    assert b["img"].shape == (3, 3, 24, 24) and b["m"].shape == (3, 24, 24)
    assert set(b["m"][1].unique().tolist()) <= {0, 1}  # fit pads with 0
    assert (tmp_path / "ds" / "tok.tokenizer.json").is_file()
    assert read_manifest(tmp_path / "ds").format_version == 4
    # The pixels are prep pack's: the same image from a path packs to the same bytes.
    PILImage.fromarray(IMAGES[0]).save(tmp_path / "0.png")
    pack(
        [str(tmp_path / "0.png")],
        tmp_path / "p",
        {"img": Image(sizes=(24,), mode="fit")},
        lambda p: {"img": p},
    )
    assert torch.equal(SampleDataset(tmp_path / "p")[0]["img"], b["img"][0])


def test_ragged_batches_pad_list_and_jagged(det: Path) -> None:
    idx = [0, 1, 2, 3]
    pad = SampleDataset(det, fields=("boxes", "labels")).__getitems__(idx)
    assert pad["boxes"].shape == (4, 3, 4) and pad["boxes_len"].tolist() == [0, 1, 2, 3]
    assert pad["boxes"][1, 1:].abs().sum() == 0  # zero padding
    listed = SampleDataset(det, fields=("boxes",), ragged="list").__getitems__(idx)["boxes"]
    assert [t.shape[0] for t in listed] == [0, 1, 2, 3]
    assert torch.equal(listed[3], torch.from_numpy(detection(3)["boxes"]))
    jag = SampleDataset(det, fields=("labels",), ragged={"labels": "jagged"}).__getitems__(idx)
    assert [t.tolist() for t in jag["labels"].unbind()] == [[], [0], [0, 1], [0, 1, 2]]


def test_a_loader_of_dict_batches_with_crops_and_workers(det: Path) -> None:
    ds = SampleDataset(det, size=32, crop=CenterCrop(24))
    for workers in (0, 2):
        seen = []
        for batch in make_loader(ds, batch_size=5, shuffle=True, num_workers=workers):
            assert batch["image"].shape[1:] == (3, 24, 24) and batch["image"].dtype == torch.uint8
            assert len(batch["caption"]) == len(batch["meta"]) == batch["boxes"].shape[0]
            seen += [m["id"] for m in batch["meta"]]
        assert sorted(seen) == list(range(12))
    with pytest.raises(ValueError, match="mode keep"):
        SampleDataset(det, size=32)


def test_in_memory_and_index(det: Path) -> None:
    a = SampleDataset(
        det, fields=("image", "caption", "index"), crop=CenterCrop(16), in_memory=True
    )
    b = SampleDataset(det, fields=("image", "caption", "index"), crop=CenterCrop(16))
    x, y = a.__getitems__([7, 2]), b.__getitems__([7, 2])
    assert torch.equal(x["image"], y["image"]) and x["caption"] == y["caption"]
    assert x["index"].tolist() == [7, 2]


BAD = [
    ({"v": np.zeros(3, np.float32)}, "field_missing", "field w is missing"),
    ({"v": np.zeros(3, np.float32), "w": 1, "z": 1}, "field_extra", "field z is not declared"),
    ({"v": np.zeros(3, np.float64), "w": 1}, "field_dtype", "field v: dtype float64"),
    ({"v": np.zeros((3, 1), np.float32), "w": 1}, "field_shape", "field v: shape [3, 1]"),
    ({"v": np.zeros(4, np.float32), "w": 1}, "field_shape", "field v: shape [4]"),
    ({"v": np.full(3, np.nan, np.float32), "w": 1}, "field_nan", "field v: holds NaN"),
    ({"v": np.zeros(3, np.float32), "w": 1, "t": "\ud800"}, "field_utf8", "field t:"),
    ({"v": np.zeros(3, np.float32), "w": 1, "j": {1j}}, "field_json", "field j: does not"),
    ({"v": np.zeros(3, np.float32), "w": 1, "i": b"not an image"}, "not_image", "field i:"),
    ({"v": np.zeros(3, np.float32), "w": 7}, "bad_label", "field w: class id 7"),
    ("raise", "function_error", "bad() raised KeyError: 'oops'"),
    ("reject", "blurry", "too blurry"),
    ([1, 2], "not_a_sample", "returned a list"),
]


def bad(case: Any) -> Any:
    if case == "raise":
        raise KeyError("oops")
    if case == "reject":
        raise prep.Reject("too blurry", code="blurry")
    return case


def test_every_bad_input_is_a_reject_naming_its_field(tmp_path: Path) -> None:
    good = {"v": np.zeros(3, np.float32), "w": 1}
    fields: dict[str, Any] = {"v": Array("float32", (3,), finite=True), "w": Label(("a", "b"))}
    full = fields | {"t": Text(), "j": Json(), "i": Image(sizes=(8,))}
    valid = {"t": "ok", "j": {}, "i": IMAGES[0]}
    for sample, code, message in BAD:
        want, ok = dict(fields), dict(good)
        if isinstance(sample, dict):
            want |= {k: full[k] for k in sample if k in valid}
            ok |= {k: valid[k] for k in sample if k in valid}
        out = tmp_path / code / str(abs(hash(message)))
        s = pack([ok] * 3 + [sample], out, want, bad, max_rejects=0.5)
        assert s.packed == 3 and s.rejected == 1, (code, message)
        (line,) = (out / "rejects.jsonl").read_text().splitlines()
        rec = json.loads(line)
        assert rec["reason"] == code and message in rec["message"] and rec["path"] == "#3"
    with pytest.raises(PrepError, match="--max-rejects"):
        pack([good, BAD[0][0]], tmp_path / "mr", fields, bad)
    assert pack([None, good], tmp_path / "skip", fields, bad).packed == 1  # None: skipped


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"my field": Text()}, "not a Python identifier"),
        ({"index": Text()}, "clashes"),
        ({"boxes_len": Text()}, "clashes"),
        ({"x_256": Text()}, "sized array"),
        ({"t": "text"}, "not a field"),
        ({"m": Mask("nope")}, "not an Image field"),
    ],
)
def test_bad_declarations_exit_2(tmp_path: Path, fields: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match) as e:
        pack([1], tmp_path / "ds", fields)
    assert e.value.exit_code == 2


def test_a_function_workers_cannot_get_stops_before_any_work(tmp_path: Path) -> None:
    import threading

    lock = threading.Lock()
    with pytest.raises(UsageError, match="--backend threads"):
        pack([1], tmp_path / "ds", {"t": Text()}, lambda x: {"t": str(lock)}, backend="loky")
    assert not (tmp_path / "ds").exists() and not (tmp_path / "ds.partial").exists()


def _files(root: Path) -> dict[str, bytes]:
    out = {p.name: p.read_bytes() for p in root.iterdir() if p.name != "manifest.json"}
    m = json.loads((root / "manifest.json").read_text())
    m["config"].pop("out")  # jobs and backend are not in it: they do not change the bytes
    return out | {"manifest": json.dumps(m, sort_keys=True).encode()}


def test_the_same_bytes_for_any_jobs_and_backend(det: Path, tmp_path: Path) -> None:
    for jobs, backend in ((2, "threads"), (2, "loky")):
        out = tmp_path / f"{backend}{jobs}"
        pack(list(range(12)), out, DETECTION, detection, shard_size=5, jobs=jobs, backend=backend)
        assert _files(out) == _files(det)


KILLER = """
import sys
sys.path.insert(0, {tests!r})
import prep, test_samples as t
prep.pack_samples(t.detection, list(range(12)), {out!r}, t.DETECTION, jobs=1, shard_size=5,
                  show_progress=False)
"""


def test_resume_after_a_kill_reuses_finished_shards(det: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    code = KILLER.format(tests=str(Path(__file__).parent), out=str(out))
    env = os.environ | {"KILL_AT": "9"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, env=env)
    assert proc.returncode == -9 and (tmp_path / "ds.partial").is_dir()
    s = pack(list(range(12)), out, DETECTION, detection, shard_size=5, resume=True)
    assert s.reused == 1 and s.packed == 12  # shard 0 finished before the kill
    assert _files(out) == _files(det)


def test_prep_samples_with_a_recipe(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    PILImage.fromarray(IMAGES[3]).save(tmp_path / "a.jpg")
    rows.write_text('{"p": "a.jpg", "y": 2}\n{"p": "missing.jpg", "y": 1}\n')
    recipe = tmp_path / "r.py"
    recipe.write_text(
        "from prep.fields import Image, Label\n"
        "FIELDS = {'image': Image(sizes=(16,)), 'y': Label()}\n"
        "def make(row):\n    return {'image': row['p'], 'y': row['y']}\n"
    )
    args = ["samples", str(rows), str(tmp_path / "ds"), "--recipe", str(recipe), "-q"]
    result = CliRunner().invoke(app, [*args, "--max-rejects", "0.5", "--backend", "loky"])
    assert result.exit_code == 0, result.output
    assert "2 inputs, 1 packed, 1 rejected" in result.output
    assert SampleDataset(tmp_path / "ds")[0]["y"].item() == 2
    (rejected,) = (tmp_path / "ds" / "rejects.jsonl").read_text().splitlines()
    assert json.loads(rejected)["path"] == "rows.jsonl:2"
    result = CliRunner().invoke(app, ["verify", str(tmp_path / "ds")])
    assert result.exit_code == 0 and "ok" in result.output


def test_a_tampered_field_description_is_refused(det: Path, copy_dataset: Any) -> None:
    ds = edit_manifest(copy_dataset(det), lambda m: m["fields"]["boxes"].update(shape=[None, 5]))
    with pytest.raises(FormatError, match="boxes"):
        SampleDataset(ds)


@pytest.mark.slow
def test_dask_backend_writes_the_same_bytes(det: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        out = tmp_path / "dask"
        pack(
            list(range(12)),
            out,
            DETECTION,
            detection,
            shard_size=5,
            backend="dask",
            scheduler=cluster.scheduler_address,
        )
    assert _files(out) == _files(det)


@pytest.mark.slow
def test_a_url_out_on_s3(det: Path, tmp_path: Path, s3: Any) -> None:
    from s3server import BUCKET

    url = f"s3://{BUCKET}/samples"
    pack(list(range(12)), url, DETECTION, detection, shard_size=5, staging=str(tmp_path / "st"))
    remote = SampleDataset(url, crop=CenterCrop(16), cache_dir=tmp_path / "cache")
    local = SampleDataset(det, crop=CenterCrop(16))
    x, y = remote.__getitems__(list(range(12))), local.__getitems__(list(range(12)))
    assert torch.equal(x["image"], y["image"]) and x["meta"] == y["meta"]
    assert torch.equal(x["boxes"], y["boxes"])


def test_inputs_from_parquet_txt_and_a_folder_with_limit(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "imgs").mkdir()
    for i in range(4):
        PILImage.fromarray(IMAGES[i]).save(tmp_path / "imgs" / f"{i}.png")
    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"path": [f"imgs/{i}.png" for i in range(4)], "y": [3, 2, 1, 0]}), rows)
    (tmp_path / "list.txt").write_text("".join(f"imgs/{i}.png\n" for i in range(4)))
    fields = {"image": Image(sizes=(16,)), "y": Label()}

    def make(x: Any) -> dict[str, Any]:
        path = x["path"] if isinstance(x, dict) else x
        return {"image": path, "y": x["y"] if isinstance(x, dict) else int(Path(path).stem)}

    want = SampleDataset(pack(rows, tmp_path / "p", fields, make) and tmp_path / "p")
    assert want.__getitems__([0, 1, 2, 3])["y"].tolist() == [3, 2, 1, 0]
    for src in ("list.txt", "imgs"):
        s = pack(tmp_path / src, tmp_path / f"o-{src}", fields, make, limit=3)
        assert s.packed == 3
        got = SampleDataset(tmp_path / f"o-{src}").__getitems__([0, 1, 2])
        assert got["y"].tolist() == [0, 1, 2]
        assert torch.equal(got["image"], want.__getitems__([0, 1, 2])["image"])


def test_ranks_quasi_random_order_skip_and_transforms(det: Path) -> None:
    from loaders import transforms as T
    from loaders.read.samplers import ShardSampler

    ds = SampleDataset(det, fields=("image", "meta", "index"), crop=CenterCrop(16))
    shares = []
    for rank in (0, 1):
        sampler = ShardSampler(ds.shard_sizes, "quasi_random", 3, 2, num_replicas=2, rank=rank)
        loader = make_loader(ds, batch_size=2, sampler=sampler)
        whole = [m["id"] for b in loader for m in b["meta"]]
        sampler.skip(2)  # one batch read before a restart: the rest, in the same order
        assert [m["id"] for b in loader for m in b["meta"]] == whole[2:]
        shares.append(whole)
    assert sorted(shares[0] + shares[1]) == list(range(12))  # two ranks, disjoint, whole
    aug = T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip()], seed=0)
    batch = ds.__getitems__([5, 1])
    assert aug(batch["image"], index=batch["index"]).shape == (2, 3, 8, 8)


def test_lying_values_are_refused_at_open(tmp_path: Path) -> None:
    rows = [{"y": i % 2, "v": np.zeros((i, 2), np.float32)} for i in range(4)]
    fields = {"y": Label(("a", "b")), "v": Array("float32", (None, 2))}
    out = tmp_path / "ds"
    pack(rows, out, fields)
    SampleDataset(out)  # as packed: fine
    y = np.load(out / "y-00000.npy")
    np.save(out / "y-00000.npy", np.full_like(y, 7))  # a class beyond the two
    edit_manifest(out, lambda m: m["shards"][0]["files"]["y-00000.npy"].update(sha256="0" * 64))
    with pytest.raises(FormatError, match="label 7 of y is not one of its classes"):
        SampleDataset(out)
    result = CliRunner().invoke(app, ["verify", str(out)])
    assert result.exit_code == 1 and "y-00000.npy" in result.output


def test_token_ids_beyond_the_vocabulary_are_a_verify_problem(tmp_path: Path) -> None:
    from loaders.fields import Tokens as TokenIds  # ids as they are: no tokenizer

    out = tmp_path / "ds"
    pack([np.array([1, 2]), np.array([0])], out, {"t": TokenIds(vocab_size=3)}, lambda v: {"t": v})
    data = out / "t-00000.npy"
    ids = np.load(data)
    np.save(data, np.full_like(ids, 9))
    sha = hashlib.sha256(data.read_bytes()).hexdigest()
    edit_manifest(out, lambda m: m["shards"][0]["files"]["t-00000.npy"].update(sha256=sha))
    SampleDataset(out)  # opening reads offsets, never every id
    result = CliRunner().invoke(app, ["verify", str(out)])
    assert result.exit_code == 1 and "token id 9 is not below vocab_size 3" in result.output
