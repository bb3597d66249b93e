"""`prep demo`: a deterministic raw dataset like real data (same seed, same bytes): RAW/images/
<class>/NNNNN.jpg (varied sizes, portrait, EXIF-rotated, some PNG or gray), masks/ (k+1 for class
k's shape), text/, table/houses.csv, detection.jsonl (boxes as fractions of the upright image),
coco.json (masks as RLE), captions.csv, and the importers' hf/, wds/ and tree/."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from prep.fields.rle import rle_encode
from prep.run.parallel import progress, run_tasks

CLASSES = ("circle", "square", "triangle", "cross")
# (width, height): phone photos, DSLR-ish, portrait, small web images.
SHAPES = (
    (640, 480),
    (480, 640),
    (1024, 768),
    (2048, 1536),
    (1536, 2048),
    (800, 600),
    (2304, 1728),
    (500, 500),
    (4032, 3024),
    (300, 400),
)
WORDS = (  # noqa: SIM905 (28 words read best as text)
    "the data loader reads packed shards from the page cache while the model trains on uint8 "
    "pixels normalised on the GPU café naïve Zürich 東京 データ 🙂 résumé"
).split()


# Kinds of file, drawn per image independently of its class: mostly plain JPEGs, some PNGs
# (web graphics: at most 1024 px), some grayscale JPEGs, some phone photos with EXIF rotation.
KINDS = ("jpeg",) * 5 + ("png", "gray", "exif")


def make_image(
    i: int, seed: int, max_side: int = 4032
) -> tuple[int, str, Image.Image, Image.Image]:
    """Sample i: (class, kind, upright image, mask). Deterministic in (i, seed)."""
    rng = np.random.default_rng([seed, i])
    cls = i % len(CLASSES)
    kind = KINDS[int(rng.integers(len(KINDS)))]
    w, h = SHAPES[int(rng.integers(len(SHAPES)))]
    scale = min(1.0, (1024 if kind == "png" else max_side) / max(w, h))
    w, h = max(16, int(w * scale)), max(16, int(h * scale))
    # Smooth colour fields with fine grain: compresses and resizes like a photo
    low = rng.integers(0, 256, (max(2, h // 128), max(2, w // 128), 3), dtype=np.uint8)
    big = cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC).astype(np.int16)
    tile = rng.integers(-12, 13, (64, 64, 1), dtype=np.int16)
    big += np.tile(tile, (h // 64 + 1, w // 64 + 1, 3))[:h, :w]
    img, mask = np.clip(big, 0, 255).astype(np.uint8), np.zeros((h, w), np.uint8)
    r = int(min(h, w) * rng.uniform(0.15, 0.35))  # one object, at one place on both
    cx, cy = int(rng.uniform(r, w - r)), int(rng.uniform(r, h - r))
    colour = tuple(int(c) for c in rng.integers(0, 256, 3))
    for target, value in ((img, colour), (mask, cls + 1)):
        if cls == 0:
            cv2.circle(target, (cx, cy), r, value, -1)
        elif cls == 1:
            cv2.rectangle(target, (cx - r, cy - r), (cx + r, cy + r), value, -1)
        elif cls == 2:
            pts = np.array([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], np.int32)
            cv2.fillPoly(target, [pts], value)
        else:
            t = max(2, r // 3)
            cv2.rectangle(target, (cx - r, cy - t), (cx + r, cy + t), value, -1)
            cv2.rectangle(target, (cx - t, cy - r), (cx + t, cy + r), value, -1)
    pil = Image.fromarray(img)
    return cls, kind, pil.convert("L") if kind == "gray" else pil, Image.fromarray(mask)


def write_sample(raw: Path, i: int, seed: int, max_side: int = 4032) -> dict[str, Any]:
    """Write image i and its mask; return its detection row (see the module's docstring)."""
    cls, kind, img, mask = make_image(i, seed, max_side)
    name = f"{i:05d}"
    (raw / "images" / CLASSES[cls]).mkdir(parents=True, exist_ok=True)
    (raw / "masks" / CLASSES[cls]).mkdir(parents=True, exist_ok=True)
    path = raw / "images" / CLASSES[cls] / (name + (".png" if kind == "png" else ".jpg"))
    if kind == "png":
        img.save(path, optimize=False)
    elif kind == "exif":
        # A phone photo held upright: stored sideways with EXIF orientation 6 (rotate 90 CW to
        # view). The mask is drawn upright, so the packer must apply the orientation.
        exif = Image.Exif()
        exif[0x0112] = 6
        img.transpose(Image.Transpose.ROTATE_90).save(path, quality=90, exif=exif)
    else:
        img.save(path, quality=90)
    mask.save(raw / "masks" / CLASSES[cls] / f"{name}.png", optimize=False)
    ys, xs = np.nonzero(np.asarray(mask))
    h, w = mask.height, mask.width
    box = [xs.min() / w, ys.min() / h, (xs.max() + 1) / w, (ys.max() + 1) / h]
    return {
        "id": i,
        "path": path.relative_to(raw).as_posix(),
        "boxes": [[round(float(v), 6) for v in box]],
        "labels": [CLASSES[cls]],
        "caption": f"a {kind} photo of a {CLASSES[cls]}",
        "width": w,
        "height": h,
        "segmentation": rle_encode(np.asarray(mask)),  # for coco.json only
    }


def write_coco(raw: Path, rows: list[dict[str, Any]]) -> None:
    """RAW/coco.json: the detection rows as COCO instances (category ids from 1, as COCO's)."""
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for row in rows:
        w, h = row["width"], row["height"]
        name = Path(row["path"]).relative_to("images").as_posix()
        images.append({"id": row["id"] + 1, "file_name": name, "width": w, "height": h})
        for (x0, y0, x1, y1), label in zip(row["boxes"], row["labels"], strict=True):
            bbox = [round(x0 * w, 2), round(y0 * h, 2), round((x1 - x0) * w, 2)]
            bbox.append(round((y1 - y0) * h, 2))
            annotations.append(
                {
                    "segmentation": row["segmentation"],  # one shape an image: its mask
                    "id": len(annotations) + 1,
                    "image_id": row["id"] + 1,
                    "category_id": CLASSES.index(label) + 1,
                    "bbox": bbox,
                    "area": round(bbox[2] * bbox[3], 2),
                    "iscrowd": 0,
                }
            )
    categories = [{"id": k + 1, "name": c, "supercategory": "shape"} for k, c in enumerate(CLASSES)]
    coco = {"images": images, "annotations": annotations, "categories": categories}
    (raw / "coco.json").write_text(json.dumps(coco, indent=1) + "\n", encoding="utf-8")
    with open(raw / "captions.csv", "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["path", "caption"])
        out.writerows([row["path"], row["caption"]] for row in rows)


def write_text(raw: Path, seed: int, docs: int = 40) -> None:
    rng = np.random.default_rng([seed, 1 << 20])
    (raw / "text").mkdir(parents=True, exist_ok=True)
    for d in range(docs):
        lines = []
        for _ in range(int(rng.integers(1, 12))):
            words = [WORDS[int(j)] for j in rng.integers(0, len(WORDS), int(rng.integers(4, 30)))]
            lines.append(" ".join(words).capitalize() + ".")
        (raw / "text" / f"{d:03d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_table(raw: Path, seed: int, rows: int = 500) -> None:
    """Houses: id, city, rooms, area (m²), garden, built (a date), price (the target, k€)."""
    rng = np.random.default_rng([seed, 1 << 21])
    cities = ("Oslo", "Lima", "Rome", "Kyoto", "Porto", "São Paulo")
    lines = ["id,city,rooms,area,garden,built,price"]
    for i in range(rows):
        city = "" if rng.random() < 0.05 else cities[int(rng.integers(0, len(cities)))]
        rooms = int(rng.integers(1, 9))
        area = rooms * 18 + float(rng.normal(10, 8))
        garden = bool(rng.random() < 0.4)
        built = np.datetime64("1950-01-01") + int(rng.integers(0, 27000))
        price = area * 3.1 + 40 * garden + float(rng.normal(0, 20))
        area_text = "" if rng.random() < 0.08 else f"{area:.1f}"
        lines.append(f"{i},{city},{rooms},{area_text},{str(garden).lower()},{built},{price:.1f}")
    (raw / "table").mkdir(parents=True, exist_ok=True)
    (raw / "table" / "houses.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_demo(
    raw: Path,
    count: int = 64,
    seed: int = 0,
    jobs: int = 1,
    max_side: int = 4032,
    show_progress: bool = True,
) -> None:
    bar = progress(count, "img", "demo", show_progress)
    tasks = [(raw, i, seed, max_side) for i in range(count)]
    rows: list[dict[str, Any]] = []
    for row in run_tasks(write_sample, tasks, jobs):
        rows.append(row)
        bar.update(1)
    rows.sort(key=lambda r: int(r["id"]))
    said = [{k: v for k, v in r.items() if k != "segmentation"} for r in rows]  # coco.json's
    lines = [json.dumps(r, ensure_ascii=False) for r in said]
    (raw / "detection.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_coco(raw, rows)
    bar.close()
    write_text(raw, seed)
    write_table(raw, seed)
    small = small_images(min(max(count, 8), 24), seed)
    write_hf(raw, small, list(CLASSES))
    (raw / "wds").mkdir(parents=True, exist_ok=True)
    per = -(-len(small) // 2)  # RAW/wds/shard-NNNNNN.tar: 2 tars, KEY.jpg, .cls, .txt and .json
    for s in range(2):
        path = raw / "wds" / f"shard-{s:06d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for r in small[s * per : (s + 1) * per]:
                meta = {"id": r["id"], "split": r["split"], "class": r["class"]}
                members = {
                    "jpg": r["jpeg"],
                    "cls": str(r["label"]).encode(),
                    "txt": r["text"].encode(),
                    "json": json.dumps(meta).encode(),
                }
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{r['id']:05d}.{ext}")
                    info.size, info.mtime, info.mode = len(data), 0, 0o644
                    tar.addfile(info, io.BytesIO(data))
    for r in small:  # RAW/tree/{train,val}/<class>/NNNNN.jpg
        folder = raw / "tree" / r["split"] / r["class"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{r['id']:05d}.jpg").write_bytes(r["jpeg"])


def small_images(count: int, seed: int, side: int = 256) -> list[dict[str, Any]]:
    """The first `count` images as JPEGs of at most `side` px, the last quarter split "val"."""
    out = []
    for i in range(count):
        cls, kind, img, _ = make_image(i, seed, side)
        data = io.BytesIO()
        img.save(data, format="JPEG", quality=90)
        split = "val" if i >= count - count // 4 else "train"
        row = {"id": i, "label": cls, "class": CLASSES[cls], "jpeg": data.getvalue()}
        out.append(row | {"text": f"a {kind} photo of a {CLASSES[cls]}", "split": split})
    return out


def write_hf(raw: Path, images: list[dict[str, Any]], classes: list[str]) -> None:
    """RAW/hf/{train,validation}-00000-of-00001.parquet as the Hub stores them (Features too)."""
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
