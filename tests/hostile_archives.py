"""Hostile Hugging Face folders (state.json, dataset_dict.json, Parquet features and Image
structs) and WebDataset tars for `prep import` (issue 34; tests/hostile_sources.py has COCO
files and caption lists, and runs them all)."""

from __future__ import annotations

import copy
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostile_base import Make, Source

# ------------------------------------------------------------------ Hugging Face


def arrow(path: Path) -> None:
    """A one-row Arrow stream (the format save_to_disk writes): a secret text."""
    import pyarrow as pa

    table = pa.table({"text": ["a secret"]})
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)


def hf_state(files: Callable[[Path, Path], Any], split: Any = "train") -> Make:
    """A save_to_disk folder whose state.json lists `files(src, outside)`."""

    def make(raw: Path, src: Path, outside: Path) -> list[str]:
        (src / "hf").mkdir()
        arrow(src / "hf" / "data-00000-of-00001.arrow")
        state = {"_data_files": files(src, outside), "_split": split}
        (src / "hf" / "state.json").write_text(json.dumps(state))
        return [str(src / "hf")]

    return make


def hf_dict(text: str) -> Make:
    def make(raw: Path, src: Path, outside: Path) -> list[str]:
        (src / "hf").mkdir()
        (src / "hf" / "dataset_dict.json").write_text(text)
        return [str(src / "hf")]

    return make


def hf_parquet(features: Any, image: str | None = None) -> Make:
    """Two rows of the demo's Parquet, its `huggingface` metadata holding `features` (a str:
    as it is), the first image struct's bytes None and its path `image` (OUTSIDE: the case's
    outside folder)."""

    def make(raw: Path, src: Path, outside: Path) -> list[str]:
        import pyarrow.parquet as pq

        table = pq.read_table(raw / "hf" / "train-00000-of-00001.parquet").slice(0, 2)
        if image is not None:
            import pyarrow as pa

            path = image.replace("OUTSIDE", str(outside))
            structs = [{"bytes": None, "path": path}, *table["image"].to_pylist()[1:]]
            table = table.set_column(0, "image", pa.array(structs, table.schema.field(0).type))
        meta = (
            features if isinstance(features, str) else json.dumps({"info": {"features": features}})
        )
        table = table.replace_schema_metadata({b"huggingface": meta.encode()})
        (src / "hf").mkdir()
        pq.write_table(table, src / "hf" / "train-00000-of-00001.parquet")
        return [str(src / "hf")]

    return make


DEMO_FEATURES = {
    "image": {"_type": "Image"},
    "label": {"_type": "ClassLabel", "names": ["circle", "square", "triangle", "cross"]},
    "text": {"_type": "Value", "dtype": "string"},
}


def features(**change: Any) -> dict[str, Any]:
    out = copy.deepcopy(DEMO_FEATURES)
    out.update(change)
    return out


# ------------------------------------------------------------------ WebDataset


Member = tuple[str, bytes] | tarfile.TarInfo


def wds(members: Callable[[Path], list[Member]], cut: bool = False, gz: bool = False) -> Make:
    """SRC/shard-000000.tar: the demo's first 3 samples, then `members(outside)` (a TarInfo:
    a link or other non-file member); `cut`: the tar ends inside its last member; `gz`:
    gzipped."""

    def make(raw: Path, src: Path, outside: Path) -> list[str]:
        buf = io.BytesIO()
        with tarfile.open(raw / "wds" / "shard-000000.tar") as demo:
            kept = [(m.name, demo.extractfile(m).read()) for m in demo.getmembers()[:12]]  # type: ignore[union-attr]
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for m in [*kept, *members(outside)]:
                if isinstance(m, tarfile.TarInfo):
                    tar.addfile(m)
                    continue
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tar.addfile(info, io.BytesIO(m[1]))
                end = tar.offset - len(m[1]) // 2  # inside this member's data
        data = buf.getvalue()[:end] if cut else buf.getvalue()
        name = "shard-000000.tar" + (".gz" if gz else "")
        if gz:
            import gzip

            data = gzip.compress(data, mtime=0)
        (src / name).write_bytes(data)
        return [str(src / name)]

    return make


def sample(key: str, **members: bytes) -> Callable[[Path], list[Member]]:
    """A sample with every member the demo's have (jpg, cls, txt, json), `members` replacing
    or adding to them."""
    every = {"jpg": _demo_jpeg(), "cls": b"1", "txt": b"a caption", "json": b"{}"} | members
    return lambda outside: [(f"{key}.{ext}", data) for ext, data in every.items()]


def _demo_jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (12, 10), (200, 30, 30)).save(buf, "JPEG")
    return buf.getvalue()


def _symlink(outside: Path) -> list[Member]:
    info = tarfile.TarInfo("zz.txt")
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return [info]


def _npy_claim() -> bytes:
    shape = (2**40,)
    text = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}".ljust(117) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode() + bytes(16)


def _pattern(text: str) -> Make:
    def make(raw: Path, src: Path, outside: Path) -> list[str]:
        return [text.replace("RAW", str(raw))]

    return make


def _expanded(raw: Path, src: Path, outside: Path) -> list[str]:
    return [str(raw / "wds" / f"shard-00000{i}.tar") for i in range(2)]


def _not_a_tar(raw: Path, src: Path, outside: Path) -> list[str]:
    (src / "shard.tar").write_bytes(b"not a tar at all" * 64)
    return [str(src / "shard.tar")]


OUTSIDE = "outside"
ARCHIVES = [
    # Hugging Face
    Source(
        "HF state.json file ../",
        "hf",
        hf_state(lambda s, o: [{"filename": "../../outside/data.arrow"}]),
        "state.json",
    ),
    Source(
        "HF state.json file absolute",
        "hf",
        hf_state(lambda s, o: [{"filename": str(o / "data.arrow")}]),
        "state.json",
    ),
    Source("HF state.json files a string", "hf", hf_state(lambda s, o: "data.arrow"), "state.json"),
    Source(
        "HF state.json split a list",
        "hf",
        hf_state(lambda s, o: [{"filename": "data-00000-of-00001.arrow"}], [1]),
        "state.json",
    ),
    Source(
        "HF dataset_dict.json split ../",
        "hf",
        hf_dict('{"splits": ["../../outside"]}'),
        "dataset_dict.json",
    ),
    Source(
        "HF dataset_dict.json split absolute",
        "hf",
        hf_dict('{"splits": ["/etc"]}'),
        "dataset_dict.json",
    ),
    Source(
        "HF dataset_dict.json nested 100,000 deep",
        "hf",
        hf_dict("[" * 10**5 + "]" * 10**5),
        "dataset_dict.json",
    ),
    Source(
        "HF features: Value without dtype",
        "hf",
        hf_parquet(features(text={"_type": "Value"})),
        "column text",
    ),
    Source(
        "HF features: ClassLabel without names",
        "hf",
        hf_parquet(features(label={"_type": "ClassLabel"})),
        "column label",
    ),
    Source("HF features a list", "hf", hf_parquet([DEMO_FEATURES]), "features"),
    Source(
        "HF features nested 100,000 deep",
        "hf",
        hf_parquet("[" * 10**5 + "]" * 10**5),
        "huggingface",
    ),
    Source(
        "HF features: Array2D shape of strings",
        "hf",
        hf_parquet(features(text={"_type": "Array2D", "shape": ["a"], "dtype": "int8"})),
        "column text",
    ),
    Source("HF Image path ../", "hf", hf_parquet(DEMO_FEATURES, "../outside/secret.png"), OUTSIDE),
    Source(
        "HF Image path absolute", "hf", hf_parquet(DEMO_FEATURES, "OUTSIDE/secret.png"), OUTSIDE
    ),
    # WebDataset
    Source(
        "WDS member names ../",
        "webdataset",
        wds(lambda o: [("../../outside/x.jpg", _demo_jpeg())]),
        "",
    ),
    Source(
        "WDS member names absolute", "webdataset", wds(lambda o: [("/etc/x.jpg", _demo_jpeg())]), ""
    ),
    Source("WDS a symlink member", "webdataset", wds(_symlink), ""),
    Source(
        "WDS a member over --max-member-mb",
        "webdataset",
        wds(sample("big", txt=bytes(100_000)), gz=True),
        "member_too_large",
        ("--max-member-mb", "0.05"),
    ),
    Source(
        "WDS a tar cut short",
        "webdataset",
        wds(sample("last", json=b"[" + b"0," * 3000 + b"0]"), cut=True),
        "truncated_tar",
    ),
    Source(
        "WDS .npy claiming 2^40 values",
        "webdataset",
        wds(sample("npy", npy=_npy_claim())),
        "field_type|npy",
    ),
    Source("WDS .cls not a number", "webdataset", wds(sample("cls", cls=b"cat")), "bad_label|cls"),
    Source(
        "WDS .json nested 100,000 deep",
        "webdataset",
        wds(sample("deep", json=b"[" * 10**5 + b"]" * 10**5)),
        "field_json|json",
    ),
    Source("WDS not a tar", "webdataset", _not_a_tar, "bad_tar|shard.tar"),
    Source("WDS pattern expanded by the shell", "webdataset", _expanded, "quote"),
    Source(
        "WDS pattern range backwards",
        "webdataset",
        _pattern("RAW/wds/shard-{000001..000000}.tar"),
        "backwards",
    ),
    Source(
        "WDS pattern of 4 billion names",
        "webdataset",
        _pattern("RAW/wds/shard-{0..4294967295}.tar"),
        "more than 1,000,000",
    ),
]
