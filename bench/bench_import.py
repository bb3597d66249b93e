"""Rows 26: imported datasets read against their sources' own readers, one shuffled epoch each,
on the same cores. The sources hold the demo photos as 256 px JPEGs (centre crops, quality 90,
as img2dataset writes them) with their class:

- WebDataset tars, read by `webdataset.WebLoader` (decode to uint8 tensors, batched in the 2
  workers) against `prep import webdataset` read by `SampleDataset`;
- a Hugging Face dataset saved to disk, read by `datasets` `with_format("torch")` in a
  2-worker DataLoader, against `prep import hf` read by `SampleDataset`.

The imports use their defaults (raw pixels at 256 px): the decoding is done once, offline.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path
from typing import Any

from bench_import_coco import coco_rows, fresh
from bench_pack import chunked, jpeg_list, parallel_rate
from rows import Row, info, prep, versus

SIZE, BATCH, REPS = 256, 128, 3


def photos(work: Path, count: int) -> tuple[list[bytes], list[str], list[str]]:
    """The first `count` demo photos as 256 px JPEG bytes, their classes and class names."""
    from PIL import Image, ImageOps

    _, paths = jpeg_list(work / "raw", count)
    blobs = []
    for p in paths:
        with Image.open(p) as im:
            im.draft("RGB", (SIZE, SIZE))  # DCT-scaled decode: the crop needs no more pixels
            out = io.BytesIO()
            ImageOps.fit(im.convert("RGB"), (SIZE, SIZE)).save(out, "JPEG", quality=90)
            blobs.append(out.getvalue())
    classes = [Path(p).parent.name for p in paths]
    return blobs, classes, sorted(set(classes))


def write_sources(work: Path, count: int) -> tuple[str, Path]:
    """The tars (a brace pattern) and the save_to_disk folder, made once a count."""
    import datasets
    import webdataset as wds

    folder = work / f"import-src-{count}"
    per_tar = max(1, count // 8)  # 8 shards: both loader workers get some
    last = -(-count // per_tar) - 1
    pattern = str(folder / "tars" / f"train-{{000000..{last:06d}}}.tar")
    if not (folder / ".done").exists():
        blobs, classes, names = photos(work, count)
        (folder / "tars").mkdir(parents=True, exist_ok=True)
        with wds.ShardWriter(
            str(folder / "tars" / "train-%06d.tar"), maxcount=per_tar, verbose=0
        ) as w:
            for i, (jpg, c) in enumerate(zip(blobs, classes, strict=True)):
                w.write({"__key__": f"{i:06d}", "jpg": jpg, "cls": names.index(c)})
        features = datasets.Features(
            {"image": datasets.Image(), "label": datasets.ClassLabel(names=names)}
        )
        rows = {"image": blobs, "label": [names.index(c) for c in classes]}
        datasets.disable_progress_bars()
        hf = datasets.Dataset.from_dict(rows, features=features)
        hf.save_to_disk(str(folder / "hf"))
        (folder / ".done").touch()
    return pattern, folder / "hf"


def references(pattern: str, hf: Path) -> dict[str, Any]:
    """The sources' own loaders, 2 workers each, shuffled."""
    import datasets
    import torch
    import webdataset as wds

    tars = (
        wds.WebDataset(pattern, shardshuffle=100, empty_check=False)
        .shuffle(1000)
        .decode("torchrgb8")
        .to_tuple("jpg", "cls")
        .batched(BATCH)
    )
    two = {"num_workers": 2, "persistent_workers": True}
    hf_torch = datasets.load_from_disk(str(hf)).with_format("torch")
    return {
        "wds ref": wds.WebLoader(tars, batch_size=None, **two),
        "hf ref": torch.utils.data.DataLoader(hf_torch, batch_size=BATCH, shuffle=True, **two),
    }


def tar_jpegs(pattern: str) -> list[bytes]:
    """Every .jpg member of the tars, in order."""
    import tarfile

    from prep.kinds.importers.tars import expand

    out = []
    for path in expand(pattern):
        with tarfile.open(path) as tar:
            for m in tar:
                f = tar.extractfile(m) if m.name.endswith(".jpg") else None
                if f is not None:
                    out.append(f.read())
    return out


def bare_bytes(blobs: list[bytes], size: int) -> int:
    """bench_pack's bare loop (Pillow's DCT-reduced decode, OpenCV's area resize) on bytes."""
    import cv2
    import numpy as np
    from PIL import Image

    cv2.setNumThreads(1)
    for b in blobs:
        with Image.open(io.BytesIO(b)) as im:
            im.draft("RGB", (size, size))
            arr = np.asarray(im.convert("RGB"))
        cv2.resize(arr, (size, size), interpolation=cv2.INTER_AREA)
    return len(blobs)


def rate(loader: Any) -> float:
    """Samples/s over one pass of a loader of dict or tuple batches."""
    n, start = 0, time.perf_counter()
    for batch in loader:
        first = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
        n += len(first)
    return n / (time.perf_counter() - start)


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from loaders import SampleDataset, make_loader

    count = min(args.count, 2000)
    pattern, hf = write_sources(work, count)
    common = ["-j", str(args.jobs), "--sizes", str(SIZE)]
    took = {
        "wds": prep("import", "webdataset", pattern, fresh(work / "i-wds"), *common),
        "hf": prep("import", "hf", str(hf), fresh(work / "i-hf"), *common),
    }
    blobs = tar_jpegs(pattern)
    bare = parallel_rate(bare_bytes, [(c, SIZE) for c in chunked(blobs, 8)], args.jobs)
    loaders = references(pattern, hf)
    for name, fields in (("wds", ("image", "cls")), ("hf", ("image", "label"))):
        ds = SampleDataset(work / f"i-{name}", fields=fields)
        loaders[name] = make_loader(ds, batch_size=BATCH, shuffle=True)
    for warm in loaders.values():
        rate(warm)
    best: dict[str, float] = {}
    for _ in range(args.reps if args.smoke else max(REPS, args.reps)):  # interleaved, best
        best = {k: max(best.get(k, 0.0), rate(v)) for k, v in loaders.items()}
    print(
        f"   (import: {count} photos at {SIZE}px, batch {BATCH}; imported in "
        f"{took['wds']:.1f} s (tars), {took['hf']:.1f} s (hf))",
        file=sys.stderr,
    )
    return [
        versus(
            "26a WebDataset import vs WebLoader, 2 workers",
            best["wds"],
            best["wds ref"],
            "img/s",
            ">= 3x",
        ),
        versus(
            "26b HF import vs datasets torch, 2 workers",
            best["hf"],
            best["hf ref"],
            "img/s",
            ">= 3x",
        ),
        *coco_rows(args, work, args.reps if args.smoke else max(REPS, args.reps)),
        info(
            "26c prep import webdataset vs bare decode+resize",
            count / took["wds"],
            bare,
            "img/s",
            "info: CLI start, listing, writes, fsyncs",
        ),
    ]
