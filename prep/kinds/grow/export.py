"""`prep export DATASET OUT --to parquet|webdataset`: the samples for other tools. Parquet files
(one a split, `SPLIT-00000-of-00001.parquet`) carry Hugging Face `Features` in their schema
(Image as PNG or JPEG bytes, ClassLabel with the names, Sequence for arrays), which
`datasets.load_dataset("parquet", ...)` and `prep import hf` read; WebDataset tars hold a
sample's files under one key (`.png`/`.jpg`, `.cls`, `.txt`, `.npy`). Image fields are
exported at their largest size; samples `prep remove` hid are left out."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields.base import decode_source
from loaders.format import read_manifest
from prep.run.errors import PrepError, UsageError

FORMATS = ("parquet", "webdataset")
KINDS = ("image", "label", "text", "scalar", "array")  # the field kinds exported


@dataclass
class ExportSummary:
    out: Path
    samples: int
    files: int

    def line(self) -> str:
        return f"{self.out}: {self.samples} samples in {self.files} files"


def feature(d: dict[str, Any], name: str) -> dict[str, Any]:
    """The Hugging Face feature of a field's declaration."""
    kind = d["kind"]
    if kind == "image":
        return {"_type": "Image"}
    if kind == "label" and d.get("classes"):
        return {"_type": "ClassLabel", "names": list(d["classes"])}
    if kind == "text":
        return {"_type": "Value", "dtype": "string"}
    dtype = d.get("dtype") or "int64"
    out: dict[str, Any] = {"_type": "Value", "dtype": dtype}
    for n in reversed(d.get("shape") or []):  # an array: a list a dimension (None: ragged)
        out = {"_type": "Sequence", "feature": out, "length": -1 if n is None else int(n)}
    return out


def image_bytes(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels).save(buf, "PNG")
    return buf.getvalue()


def rows(root: Path, fields: list[str]) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """Each sample kept as (split, {field: value as Parquet holds it})."""
    from loaders import SampleDataset

    m = read_manifest(root)
    sizes = [s for n in fields for s in m.fields[n].get("sizes", [])]
    size = max(sizes) if sizes else None
    ds = SampleDataset(root, fields=[*fields, "index"], size=size, ragged="list")
    splits = m.split_of()
    for i in range(len(ds)):
        sample = ds[i]
        shard, _ = ds._find(np.asarray([i]))
        row: dict[str, Any] = {}
        for name in fields:
            d, v = m.fields[name], sample[name]
            if d["kind"] == "image":
                pixels = v.permute(1, 2, 0).numpy() if v.ndim == 3 else v.numpy()
                row[name] = {"bytes": image_bytes(np.ascontiguousarray(pixels)), "path": None}
            elif d["kind"] == "text":
                row[name] = v if isinstance(v, str) else decode_source(np.asarray(v))
            else:  # as declared: a phash reads back as int64, its bits are a uint64's
                dtype = d.get("dtype")
                row[name] = np.asarray(v).astype(dtype or np.int64).tolist()
        yield splits[int(shard[0])], row


def export(root: Path, out: Path, to: str) -> ExportSummary:
    if to not in FORMATS:
        raise UsageError(f"--to {to!r} must be one of {', '.join(FORMATS)}")
    if out.exists() and any(out.iterdir()):
        raise PrepError(f"{out} is not empty. HINT: export into a new folder")
    m = read_manifest(root)
    fields = [n for n, d in m.fields.items() if d["kind"] in KINDS and n != "image_hw"]
    skipped = [n for n in m.fields if n not in fields]
    if any(m.fields[n].get("mode") == "keep" for n in fields if m.fields[n]["kind"] == "image"):
        raise PrepError(f"{root}: images of mode keep are not exported yet. HINT: repack")
    by_split: dict[str, list[dict[str, Any]]] = {}
    for split, row in rows(root, fields):
        by_split.setdefault(split or "train", []).append(row)
    out.mkdir(parents=True, exist_ok=True)
    write = _parquet if to == "parquet" else _tars
    decl = {n: m.fields[n] for n in fields}
    files = sum(write(out, split, got, decl) for split, got in by_split.items())
    if skipped:
        print(f"note: fields {skipped} are not exported (kinds {KINDS} are)")
    return ExportSummary(out, sum(len(r) for r in by_split.values()), files)


def arrow_type(d: dict[str, Any]) -> Any:
    """The Arrow type of a field's column, as `datasets` stores its feature."""
    import pyarrow as pa

    kind = d["kind"]
    if kind == "image":
        return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    if kind == "text":
        return pa.string()
    if kind == "label" and d.get("classes"):
        return pa.int64()
    t = pa.from_numpy_dtype(np.dtype(d.get("dtype") or "int64"))
    for n in reversed(d.get("shape") or []):
        t = pa.list_(t) if n is None else pa.list_(t, int(n))
    return t


def _parquet(out: Path, split: str, got: list[dict[str, Any]], decl: dict[str, Any]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = {n: feature(d, n) for n, d in decl.items()}
    schema = pa.schema([(n, arrow_type(d)) for n, d in decl.items()])
    table = pa.Table.from_pylist(got, schema=schema)
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    table = table.replace_schema_metadata(meta)
    path = out / f"{split}-00000-of-00001.parquet"
    pq.write_table(table, path)
    return 1


def _tars(out: Path, split: str, got: list[dict[str, Any]], decl: dict[str, Any]) -> int:
    path = out / f"{split}-00000.tar"
    with tarfile.open(path, "w") as tar:
        for k, row in enumerate(got):
            key = f"{split}-{k:08d}"
            for name, v in row.items():
                kind = decl[name]["kind"]
                if kind == "image":
                    data, ext = v["bytes"], "png"
                elif kind == "text":
                    data, ext = str(v).encode(), "txt"
                elif kind == "label":
                    data, ext = str(v).encode(), "cls"
                else:
                    buf = io.BytesIO()
                    np.save(buf, np.asarray(v, dtype=decl[name].get("dtype")))
                    data, ext = buf.getvalue(), "npy"
                info = tarfile.TarInfo(f"{key}.{name}.{ext}")
                info.size, info.mtime = len(data), 0  # no time: the same bytes every export
                tar.addfile(info, io.BytesIO(data))
    return 1
