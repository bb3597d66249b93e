"""`prep demo`'s sources for `prep import hf`, `prep import webdataset` and `prep pack --splits
train,val`, of small copies of the demo's first images (the last quarter the validation split)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any


def write_hf(raw: Path, images: list[dict[str, Any]], classes: list[str]) -> None:
    """RAW/hf/{train,validation}-00000-of-00001.parquet as the Hub stores them (Features in the
    schema's metadata); `images`: dicts of id, label, class, text, jpeg (bytes) and split."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = {
        "image": {"_type": "Image"},
        "label": {"_type": "ClassLabel", "names": classes},
        "text": {"_type": "Value", "dtype": "string"},
    }
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema(
        [("image", image_type), ("label", pa.int64()), ("text", pa.string())], metadata=meta
    )
    (raw / "hf").mkdir(parents=True, exist_ok=True)
    for split, name in (("train", "train"), ("val", "validation")):
        rows = [r for r in images if r["split"] == split]
        table = pa.table(
            {
                "image": [{"bytes": r["jpeg"], "path": f"{r['id']:05d}.jpg"} for r in rows],
                "label": [r["label"] for r in rows],
                "text": [r["text"] for r in rows],
            },
            schema=schema,
        )
        pq.write_table(table, raw / "hf" / f"{name}-00000-of-00001.parquet")


def write_wds(raw: Path, images: list[dict[str, Any]], shards: int = 2) -> None:
    """RAW/wds/shard-NNNNNN.tar: the images in `shards` tars, KEY.jpg, .cls, .txt and .json."""
    (raw / "wds").mkdir(parents=True, exist_ok=True)
    per = -(-len(images) // shards)
    for s in range(shards):
        path = raw / "wds" / f"shard-{s:06d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for r in images[s * per : (s + 1) * per]:
                key = f"{r['id']:05d}"
                meta = {"id": r["id"], "split": r["split"], "class": r["class"]}
                members = {
                    "jpg": r["jpeg"],
                    "cls": str(r["label"]).encode(),
                    "txt": r["text"].encode(),
                    "json": json.dumps(meta).encode(),
                }
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    tar.addfile(info, io.BytesIO(data))


def write_tree(raw: Path, images: list[dict[str, Any]]) -> None:
    """RAW/tree/{train,val}/<class>/NNNNN.jpg."""
    for r in images:
        folder = raw / "tree" / r["split"] / r["class"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{r['id']:05d}.jpg").write_bytes(r["jpeg"])
