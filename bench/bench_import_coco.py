"""Rows 26d and 26e (bench_import.py adds them): the demo photos with their boxes as a COCO
instances file, at the demo's sizes (up to 4032 px, as photos come).

- 26d: one shuffled epoch of `prep import coco`'s dataset read by `SampleDataset` (image,
  boxes, labels) against what a user writes after torchvision's `CocoDetection`: a Dataset that
  looks up the image's entry and annotations in the JSON's index, opens and converts it with
  PIL and resizes it (and its boxes) to 256 px, every sample, in a 2-worker DataLoader, batches
  of the same size (torchvision itself is not installed: the class is written out here).
- 26e: `prep import coco` against the bare decode+resize loop (bench_pack's) on the same images
  and cores.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench_pack import bare_chunk, chunked, parallel_rate
from rows import Row, prep, versus

SIZE, BATCH = 256, 64


def fresh(out: Path) -> str:
    """OUT removed beforehand: --overwrite's removal of the last run's files is not timed (the
    bare loop writes nothing to remove)."""
    shutil.rmtree(out, ignore_errors=True)
    return str(out)


def coco_file(raw: Path, work: Path, count: int) -> Path:
    """The first `count` images of the demo's coco.json; a demo made before prep demo wrote
    one gets it from its detection.jsonl (sizes read upright, EXIF orientation applied)."""
    out = work / f"coco-{count}.json"
    if out.exists():
        return out
    if (raw / "coco.json").exists():
        coco = json.loads((raw / "coco.json").read_text())
    else:
        coco = _from_detection(raw)
    coco["images"] = coco["images"][:count]
    ids = {im["id"] for im in coco["images"]}
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] in ids]
    out.write_text(json.dumps(coco))
    return out


def _from_detection(raw: Path) -> dict[str, Any]:
    from PIL import Image

    rows = [json.loads(x) for x in (raw / "detection.jsonl").read_text().splitlines()]
    names = sorted({label for r in rows for label in r["labels"]})
    images, anns = [], []
    for r in rows:
        with Image.open(raw / r["path"]) as im:
            w, h = im.size
            if im.getexif().get(0x0112, 1) in (5, 6, 7, 8):
                w, h = h, w
        name = Path(r["path"]).relative_to("images").as_posix()
        images.append({"id": r["id"] + 1, "file_name": name, "width": w, "height": h})
        for (x0, y0, x1, y1), label in zip(r["boxes"], r["labels"], strict=True):
            bbox = [x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h]
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": r["id"] + 1,
                    "category_id": names.index(label) + 1,
                    "bbox": bbox,
                    "area": bbox[2] * bbox[3],
                    "iscrowd": 0,
                }
            )
    categories = [{"id": k + 1, "name": c} for k, c in enumerate(names)]
    return {"images": images, "annotations": anns, "categories": categories}


class CocoStyle:
    """torchvision's CocoDetection as a user completes it for training: the JSON indexed once
    (image entries by id, annotations by image id), then per sample the index lookups, PIL's
    open and convert, a resize of the shorter side to `size` and a centre crop, the boxes
    scaled and moved likewise (xywh to xyxy), as tensors."""

    def __init__(self, annotations: Path, images: Path, size: int, count: int):
        coco = json.loads(annotations.read_text())
        self.images, self.size = images, size
        self.entries = {im["id"]: im for im in coco["images"]}
        self.anns: dict[int, list[dict[str, Any]]] = {i: [] for i in self.entries}
        for a in coco["annotations"]:
            self.anns[a["image_id"]].append(a)
        self.cats = {c["id"]: k for k, c in enumerate(coco["categories"])}
        self.ids = sorted(self.entries)[:count]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[Any, dict[str, Any]]:
        import numpy as np
        import torch
        from PIL import Image

        entry = self.entries[self.ids[i]]
        anns = self.anns[entry["id"]]
        with Image.open(self.images / entry["file_name"]) as im:
            img = im.convert("RGB")
        w, h = img.size
        scale = self.size / min(w, h)
        sw, sh = max(self.size, round(w * scale)), max(self.size, round(h * scale))
        left, top = (sw - self.size) // 2, (sh - self.size) // 2
        img = img.resize((sw, sh), Image.Resampling.BILINEAR)
        img = img.crop((left, top, left + self.size, top + self.size))
        xywh = np.asarray([a["bbox"] for a in anns], np.float32).reshape(-1, 4)
        boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
        boxes = boxes * np.float32([sw / w, sh / h] * 2) - np.float32([left, top] * 2)
        boxes = boxes.clip(0, self.size)
        labels = torch.as_tensor([self.cats[a["category_id"]] for a in anns], dtype=torch.int64)
        pixels = torch.from_numpy(np.array(img)).permute(2, 0, 1)  # as PILToTensor
        return pixels, {"boxes": torch.from_numpy(boxes), "labels": labels}


def collate(batch: list[Any]) -> tuple[Any, ...]:
    """torchvision's detection references' collate: a tuple of each part's list."""
    return tuple(zip(*batch, strict=True))


def rate(loader: Any) -> float:
    n, start = 0, time.perf_counter()
    for batch in loader:
        n += len(batch[0]) if isinstance(batch, tuple) else len(batch["image"])
    return n / (time.perf_counter() - start)


def coco_rows(args: Any, work: Path, reps: int) -> list[Row]:
    import torch

    from loaders import SampleDataset, make_loader

    raw, count = work / "raw", min(args.count, 2000)
    annotations = coco_file(raw, work, count)
    out = work / "i-coco"
    common = ["-j", str(args.jobs), "--sizes", str(SIZE)]
    entries = json.loads(annotations.read_text())["images"]
    paths = [str(raw / "images" / e["file_name"]) for e in entries]
    took, bare = float("inf"), 0.0
    for _ in range(2):  # interleaved, best of two each
        cmd = ("import", "coco", str(annotations), str(raw / "images"), fresh(out), *common)
        took = min(took, prep(*cmd))
        chunks = [(c, SIZE) for c in chunked(paths, 8)]
        bare = max(bare, parallel_rate(bare_chunk, chunks, args.jobs))
    ref = CocoStyle(annotations, raw / "images", SIZE, min(args.sample, count, 128))
    two = {"num_workers": 2, "persistent_workers": True, "collate_fn": collate}
    loaders = {
        "ref": torch.utils.data.DataLoader(ref, batch_size=BATCH, shuffle=True, **two),
        "ours": make_loader(
            SampleDataset(out, fields=("image", "boxes", "labels"), ragged="list"),
            batch_size=BATCH,
            shuffle=True,
        ),
    }
    best = {k: rate(v) for k, v in loaders.items()}  # the first pass warms both
    for _ in range(reps):  # interleaved, best of
        best = {k: max(best[k], rate(v)) for k, v in loaders.items()}
    print(
        f"   (coco: {count} photos imported at {SIZE}px in {took:.1f} s; the reference reads "
        f"{len(ref)} of them)",
        file=sys.stderr,
    )
    return [
        versus(
            "26d COCO import vs CocoDetection-style, 2 wk",
            best["ours"],
            best["ref"],
            "img/s",
            ">= 10x",
        ),
        versus(
            "26e prep import coco vs bare decode+resize", count / took, bare, "img/s", ">= 0.9x"
        ),
    ]
