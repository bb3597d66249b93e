"""prep's loader against its peers' (LitData, WebDataset) on the same detection samples (issue 40).

2,000 samples by default: a 256 px JPEG q90, 0-12 boxes with a label each, a caption. prep packs
them; LitData and WebDataset store prep's own JPEG bytes, boxes, labels and captions, so every
system decodes the same bytes with simplejpeg, and every sample is checked equal across the
systems before anything is timed. Then epochs of batch 256, shuffled, at 0 and 2 workers: fresh
(a new loader, its workers started, each epoch) and reused (one loader, the second epoch on),
interleaved, the best of --reps each; printed as img/s and prep's ratio to each peer.

    pip install litdata webdataset   # the peers (a peer not installed is left out)
    python bench/peers.py --count 2000 --reps 3

litdata requires torchvision, and pip may replace torch to satisfy it: keep yours with
`pip install litdata webdataset "torch==$(python -c 'import torch; print(torch.__version__)')"`.

FFCV (bench/peers_ffcv.py: image rows, prep's ImageShardDataset against FFCV's JPEG field, prep
both accurate and fast_dct=True) builds a C extension against libjpeg-turbo and OpenCV, and its
own requirements pull opencv-python (beside prep's headless OpenCV) and may replace torch; with
torch pinned in a constraints file (pip's -c) on every call:

    echo "torch==$(python -c 'import torch; print(torch.__version__)')" > torch.txt
    apt-get install libturbojpeg0-dev libopencv-dev pkg-config   # Debian's names
    pip install -c torch.txt numba opencv-python-headless psutil tqdm
    pip install -c torch.txt terminaltables pytorch_pfn_extras fastargs assertpy
    pip install -c torch.txt --no-deps --no-build-isolation ffcv   # 1.0.2, built on Python 3.11
    python bench/peers.py --peers ffcv --reps 7

Without ffcv importable its rows are left out, with the reason.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import peers_ffcv
import simplejpeg
import torch

BATCH, SIDE = 256, 256
HERE = Path(__file__).resolve().parent
PEERS = ("litdata", "webdataset", "ffcv")


def sample(i: int) -> dict[str, Any]:
    """Sample i: a smooth photo-like 256 px image, 0-12 filled boxes with labels, a caption."""
    rng = np.random.default_rng(i)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32) / SIDE
    base = rng.uniform(40, 200, 3).astype(np.float32)
    img = base + 50 * np.stack([np.sin(6 * xx + k + i) * np.cos(5 * yy - k) for k in range(3)], -1)
    n = int(rng.integers(0, 13))
    xy = rng.uniform(0, SIDE - 40, (n, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(8, 40, (n, 2)).astype(np.float32)], axis=1)
    for x0, y0, x1, y1 in boxes.astype(int):
        img[y0:y1, x0:x1] = rng.uniform(0, 255, 3)
    jpeg = simplejpeg.encode_jpeg(np.ascontiguousarray(img.clip(0, 255).astype(np.uint8)), 90)
    labels = rng.integers(0, 80, n).astype(np.int64)
    return {"image": jpeg, "boxes": boxes, "labels": labels, "caption": f"photo {i}: {n} objects"}


def write_prep(count: int, out: Path) -> list[dict[str, Any]]:
    """prep's dataset of `count` samples, and each sample as stored (its JPEG bytes), in order."""
    import prep as prep_api
    from loaders import SampleDataset
    from loaders.format import OFFSETS
    from prep.fields import Array, Image, Text

    if not (out / "manifest.json").is_file():
        fields = {
            "image": Image(sizes=(SIDE,), codec="jpeg", quality=90),
            "boxes": Array("float32", (None, 4)),
            "labels": Array("int64", (None,)),
            "caption": Text(),
        }
        prep_api.pack_samples(
            sample, list(range(count)), out, fields, jobs=1, overwrite=True, show_progress=False
        )
    ds = SampleDataset(out, fields=("boxes", "labels", "caption"), ragged="list")
    stored = []
    for shard, n in enumerate(ds.shard_sizes):
        data = ds.store.array(shard, f"image_{SIDE}")
        off = ds.store.array(shard, f"image_{SIDE}{OFFSETS}")
        stored += [bytes(data[off[k] : off[k + 1]]) for k in range(n)]
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=len(ds), collate_fn=lambda b: b)))
    return [
        {"image": jpeg, **{k: (v.numpy() if torch.is_tensor(v) else v) for k, v in s.items()}}
        for jpeg, s in zip(stored, batch, strict=True)
    ]


def decoded(s: dict[str, Any]) -> dict[str, Any]:
    """A stored sample as every system hands it out: CHW uint8 pixels, tensors, the caption."""
    pixels = torch.from_numpy(simplejpeg.decode_jpeg(s["image"])).permute(2, 0, 1)
    boxes, labels = torch.as_tensor(s["boxes"]), torch.as_tensor(s["labels"])
    return {"image": pixels, "boxes": boxes, "labels": labels, "caption": s["caption"]}


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """prep's ragged="list" batch: stacked images, a list per ragged field."""
    out = {k: [s[k] for s in samples] for k in ("boxes", "labels", "caption")}
    return {"image": torch.stack([s["image"] for s in samples]), **out}


def litdata_system(stored: list[dict[str, Any]], out: Path) -> Callable[[int], Any] | None:
    try:
        import litdata
    except ImportError:
        return None
    if not (out / "index.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        writer = litdata.streaming.writer.BinaryWriter(str(out), chunk_bytes="64MB")
        for i, s in enumerate(stored):
            writer.add_item(i, {k: s[k] for k in ("image", "boxes", "labels", "caption")})
        writer.done()
        writer.merge()

    class Detection(litdata.StreamingDataset):  # type: ignore[misc]
        def __getitem__(self, index: Any) -> dict[str, Any]:
            return decoded(super().__getitem__(index))

    def loader(workers: int) -> Any:
        ds = Detection(str(out), shuffle=True)
        return litdata.StreamingDataLoader(
            ds,
            batch_size=BATCH,
            num_workers=workers,
            collate_fn=collate,
            persistent_workers=workers > 0,
        )

    return loader


def webdataset_system(stored: list[dict[str, Any]], out: Path) -> Callable[[int], Any] | None:
    try:
        import webdataset as wds
    except ImportError:
        return None
    shards = [out / f"{j:03d}.tar" for j in range(-(-len(stored) // 1000))]
    if not all(p.is_file() for p in shards):
        out.mkdir(parents=True, exist_ok=True)
        for j, path in enumerate(shards):
            with wds.TarWriter(str(path)) as w:
                for i in range(1000 * j, min(1000 * (j + 1), len(stored))):
                    s = stored[i]
                    w.write(
                        {
                            "__key__": f"{i:06d}",
                            "jpg": s["image"],
                            "txt": s["caption"],
                            "boxes.npy": s["boxes"],
                            "labels.npy": s["labels"],
                        }
                    )

    def parse(raw: dict[str, Any]) -> dict[str, Any]:
        return decoded(
            {
                "image": raw["jpg"],
                "caption": raw["txt"].decode(),
                "boxes": np.load(io.BytesIO(raw["boxes.npy"])),
                "labels": np.load(io.BytesIO(raw["labels.npy"])),
            }
        )

    def loader(workers: int) -> Any:
        urls = [str(p) for p in shards]
        ds = wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False).shuffle(1000)
        ds = ds.map(parse).batched(BATCH, collation_fn=collate, partial=True)
        return wds.WebLoader(
            ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0
        )

    return loader


def prep_system(out: Path) -> Callable[[int], Any]:
    from loaders import SampleDataset, make_loader

    def loader(workers: int) -> Any:
        ds = SampleDataset(out, fields=("image", "boxes", "labels", "caption"), ragged="list")
        return make_loader(ds, BATCH, shuffle=True, num_workers=workers)

    return loader


def check_equal(systems: dict[str, Callable[[int], Any]], count: int) -> None:
    """Every system's samples (one epoch, no workers) equal prep's, matched by caption."""
    seen: dict[str, dict[str, Any]] = {}
    for name, make in systems.items():
        got: dict[str, Any] = {}
        for batch in make(0):
            for j, caption in enumerate(batch["caption"]):
                got[caption] = (batch["image"][j], batch["boxes"][j], batch["labels"][j])
        assert len(got) == count, f"{name}: {len(got)} samples, not {count}"
        seen[name] = got
    want = seen["prep"]
    for name, got in seen.items():
        for caption, (img, boxes, labels) in got.items():
            w = want[caption]
            ok = torch.equal(img, w[0]) and torch.equal(boxes, w[1]) and torch.equal(labels, w[2])
            assert ok, f"{name}: {caption!r} differs from prep's"
    print(f"   every sample equal across {', '.join(seen)} ({count} samples)", file=sys.stderr)


def epoch(loader: Any) -> float:
    n, start = 0, time.perf_counter()
    for batch in loader:
        n += len(batch["image"])
    return n / (time.perf_counter() - start)


def measure(
    systems: dict[str, Callable[[int], Any]], reps: int
) -> dict[tuple[str, int, str], float]:
    """Best img/s of each (system, workers, fresh|reused) over interleaved repeats."""
    reused = {(s, w): make(w) for s, make in systems.items() for w in (0, 2)}
    for loader in reused.values():
        epoch(loader)  # workers started, files in the page cache
    best: dict[tuple[str, int, str], float] = {}
    for _ in range(reps):
        for (s, w), loader in reused.items():
            for kind, rate in (("fresh", epoch(systems[s](w))), ("reused", epoch(loader))):
                best[s, w, kind] = max(best.get((s, w, kind), 0.0), rate)
    return best


def table(best: dict[tuple[str, int, str], float], peers: list[str]) -> Iterator[str]:
    yield "| prep vs peer | fresh loader | reused loader |"
    yield "|---|---|---|"
    for w in (0, 2):
        for peer in peers:
            cells = [
                f"{best['prep', w, k] / best[peer, w, k]:.2f}x "
                f"({best['prep', w, k]:.0f} vs {best[peer, w, k]:.0f} img/s)"
                for k in ("fresh", "reused")
            ]
            yield f"| {w} workers vs {peer} {w} workers | {' | '.join(cells)} |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=2000, help="detection samples")
    ap.add_argument(
        "--reps",
        type=int,
        default=3,
        help="interleaved repeats; the best counts (FFCV's: the median)",
    )
    ap.add_argument("--out", type=Path, default=HERE / "out" / "peers")
    ap.add_argument("--peers", default=",".join(PEERS), help="which peers, comma-separated")
    args = ap.parse_args()
    wanted = args.peers.split(",")
    work = args.out / f"n{args.count}"
    start = time.perf_counter()
    stored = write_prep(args.count, work / "prep")
    systems = {"prep": prep_system(work / "prep")}
    for name, make in (("litdata", litdata_system), ("webdataset", webdataset_system)):
        if name not in wanted:
            continue
        found = make(stored, work / name)
        if found is None:
            print(f"   {name} is not installed: left out (pip install {name})", file=sys.stderr)
        else:
            systems[name] = found
    print(f"   data ready in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    cores = len(__import__("os").sched_getaffinity(0))
    if len(systems) > 1:
        check_equal(systems, args.count)
        best = measure(systems, args.reps)
        print(
            f"\n{args.count} detection samples, batch {BATCH}, {cores} cores, best of {args.reps}\n"
        )
        print("\n".join(table(best, [p for p in systems if p != "prep"])))
    if "ffcv" in wanted:
        ffcv = list(peers_ffcv.rows(stored, work, args.reps))
        if ffcv:
            print(f"\n{args.count} images, batch {BATCH}, {cores} cores, median of {args.reps}\n")
            print("\n".join(ffcv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
