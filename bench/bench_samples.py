"""Rows 25: samples of any shape (prep samples, SampleDataset) against the image kind on the
same photos, and detection-shaped samples against a per-sample pickle file (how LitData and
MosaicML Streaming store Python objects) in a 2-worker DataLoader, and against a bare 2-thread
decode of the same JPEG bytes."""

from __future__ import annotations

import argparse
import io
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
from bench_jpeg import bare_rate
from bench_pack import jpeg_list
from rows import Row, prep, versus

SIZE, BATCH = 256, 256
REPS = 3

# The recipe `prep samples` runs for row 25c: the path and the label, as `prep pack` reads them.
PATH_LABEL = """
from prep.fields import Image, Label
CLASSES = ("circle", "square", "triangle", "cross")
FIELDS = {"image": Image(sizes=(256,), codec=CODEC), "label": Label(CLASSES)}
def make(row):
    return {"image": row["path"], "label": row["label"]}
"""


def detection(i: int, path: str) -> dict[str, Any]:
    """A detection-shaped sample: the photo, 0-50 boxes with their classes, a caption."""
    rng = np.random.default_rng(i)
    n = int(rng.integers(0, 51))
    xy = rng.random((n, 2), dtype=np.float32) * 200
    boxes = np.concatenate([xy, xy + rng.random((n, 2), dtype=np.float32) * 56], axis=1)
    labels = rng.integers(0, 80, n)
    return {"image": path, "boxes": boxes, "labels": labels, "caption": f"photo {i}: {n} objects"}


class PickleFile:
    """The baseline: every sample a pickled dict (JPEG bytes, boxes, labels, caption) in one
    file with an index of offsets; a read unpickles it and decodes the JPEG with PIL."""

    def __init__(self, path: Path, offsets: np.ndarray):
        self.path, self.offsets = path, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Any:
        import torch
        from PIL import Image

        with open(self.path, "rb") as f:
            f.seek(int(self.offsets[i]))
            s = pickle.loads(f.read(int(self.offsets[i + 1] - self.offsets[i])))
        with Image.open(io.BytesIO(s["image"])) as im:
            img = torch.from_numpy(np.asarray(im.convert("RGB"))).permute(2, 0, 1)
        return img, torch.from_numpy(s["boxes"]), torch.from_numpy(s["labels"]), s["caption"]


def collate(batch: list[Any]) -> Any:
    import torch

    imgs, boxes, labels, captions = zip(*batch, strict=True)
    return torch.stack(imgs), list(boxes), list(labels), list(captions)


def jpegs(ds: Any) -> list[np.ndarray]:
    """Every sample's stored JPEG bytes of a samples dataset, copied out."""
    from loaders.read.store import by_shard

    shard, local = ds._find(ds._checked(np.arange(len(ds))))
    return [np.array(b) for b in ds.arrays.samples(f"image_{SIZE}", by_shard(shard), local)[0]]


def _pickle_file(work: Path, root: Path) -> PickleFile:
    """The same samples as the detection pack: its JPEG bytes, boxes, labels and captions."""
    from loaders import SampleDataset

    ds = SampleDataset(root, fields=("boxes", "labels", "caption"), ragged="list")
    rest = ds.__getitems__(list(range(len(ds))))
    path, offsets = work / "det.pickles", [0]
    with open(path, "wb") as f:
        for i, jpeg in enumerate(jpegs(ds)):
            rec = {"image": jpeg.tobytes(), "caption": rest["caption"][i]}
            rec |= {k: rest[k][i].numpy() for k in ("boxes", "labels")}
            offsets.append(offsets[-1] + f.write(pickle.dumps(rec)))
    return PickleFile(path, np.array(offsets))


def _packs(work: Path, args: argparse.Namespace) -> tuple[dict[str, float], list[str]]:
    """prep pack and prep samples of the same photos, raw and JPEG, each timed (best of reps)."""
    lst, paths = jpeg_list(work / "raw", args.count)
    common = ["-j", str(args.jobs), "--overwrite"]
    took: dict[str, float] = {}
    for codec in ("raw", "jpeg"):
        recipe = work / f"path_label_{codec}.py"
        recipe.write_text(PATH_LABEL.replace("CODEC", repr(codec)))
        for _ in range(args.reps):
            pack = prep("pack", str(lst), str(work / f"s-pack-{codec}"), *common, "--codec", codec)
            samples = prep(
                "samples",
                str(lst),
                str(work / f"s-samples-{codec}"),
                *common,
                "--recipe",
                str(recipe),
            )
            took[f"pack {codec}"] = min(took.get(f"pack {codec}", 1e9), pack)
            took[f"samples {codec}"] = min(took.get(f"samples {codec}", 1e9), samples)
    return took, paths


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    took, paths = _packs(work, args)
    n = len(paths)
    det_out = _detection_pack(args, work, paths)
    best = _epochs(args, work, det_out)
    print(f"   (samples: {n} photos at {SIZE}px, batch {BATCH})", file=sys.stderr)
    return [*_samples_rows(best, took, n), *_detection_rows(best)]


def _detection_pack(args: argparse.Namespace, work: Path, paths: list[str]) -> Path:
    """The photos as detection-shaped samples (`detection`), packed by prep.pack_samples."""
    import prep as prep_api
    from prep.fields import Array, Image, Text

    fields = {
        "image": Image(sizes=(SIZE,), codec="jpeg"),
        "boxes": Array("float32", (None, 4)),
        "labels": Array("int64", (None,)),
        "caption": Text(),
    }
    det_out = work / "s-detection"
    inputs = list(enumerate(paths))
    prep_api.pack_samples(
        lambda x: detection(*x),
        inputs,
        det_out,
        fields,
        jobs=args.jobs,
        overwrite=True,
        show_progress=False,
    )
    return det_out


def _epochs(args: argparse.Namespace, work: Path, det_out: Path) -> dict[str, float]:
    """Each way's best samples/s over interleaved repeats."""
    import torch

    from loaders import ImageShardDataset, SampleDataset, make_loader

    loaders: dict[str, Any] = {}
    for codec in ("raw", "jpeg"):
        ds = SampleDataset(work / f"s-samples-{codec}", fields=("image", "label"))
        loaders[f"samples {codec}"] = make_loader(ds, batch_size=BATCH, shuffle=True)
        ref = ImageShardDataset(work / f"s-pack-{codec}", fields=("image", "label"))
        loaders[f"images {codec}"] = make_loader(ref, batch_size=BATCH, shuffle=True)
    det = SampleDataset(det_out)
    loaders["detection"] = make_loader(det, batch_size=BATCH, shuffle=True)
    pickles = torch.utils.data.DataLoader(
        _pickle_file(work, det_out),
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        collate_fn=collate,
    )
    blobs = jpegs(det)
    for warm in (*loaders.values(), pickles):
        _rate(warm)
    best: dict[str, float] = {}
    for rep in range(args.reps if args.smoke else max(REPS, args.reps)):  # interleaved, best
        rates = {k: _rate(v) for k, v in loaders.items()}
        rates |= {"pickle": _rate(pickles), "bare": bare_rate(blobs, rep)}
        best = {k: max(best.get(k, 0.0), r) for k, r in rates.items()}
    return best


def _samples_rows(best: dict[str, float], took: dict[str, float], n: int) -> list[Row]:
    """25a, 25b: prep samples and SampleDataset against prep pack and ImageShardDataset."""
    return [
        *(
            versus(
                f"25a SampleDataset vs ImageShardDataset, {c}",
                best[f"samples {c}"],
                best[f"images {c}"],
                "img/s",
                ">= 0.95x",
            )
            for c in ("raw", "jpeg")
        ),
        *(
            versus(
                f"25b prep samples vs prep pack, {c}",
                n / took[f"samples {c}"],
                n / took[f"pack {c}"],
                "img/s",
                ">= 0.9x",
            )
            for c in ("raw", "jpeg")
        ),
    ]


def _detection_rows(best: dict[str, float]) -> list[Row]:
    """25c, 25d: detection samples against a pickle file and against a bare decode."""
    return [
        versus(
            "25c detection dicts vs pickle file, 2 workers",
            best["detection"],
            best["pickle"],
            "img/s",
            ">= 5x",
        ),
        versus(
            "25d detection dicts vs bare 2-thread decode",
            best["detection"],
            best["bare"],
            "img/s",
            ">= 0.8x",
        ),
    ]


def _rate(loader: Any) -> float:
    """Samples/s over one pass of a loader of dict or tuple batches."""
    import time

    n, start = 0, time.perf_counter()
    for batch in loader:
        n += len(batch["image"] if isinstance(batch, dict) else batch[0])
    return n / (time.perf_counter() - start)
