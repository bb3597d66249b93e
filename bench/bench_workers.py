"""Rows 40g-40h: DataLoader workers on detection samples (issue 40). The demo's photos as 256 px
JPEG q90 with 0-50 boxes, their labels and a caption (bench_samples' recipe), batch 256: an
epoch with 2 workers against the same loader with 0 workers, reused (persistent workers, the
second pass on) and fresh (a new loader each epoch, its workers started). Best of interleaved
repeats.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rows import Row, versus

BATCH = 256


def _rate(loader: Any) -> float:
    n, start = 0, time.perf_counter()
    for batch in loader:
        n += len(batch["image"])
    return n / (time.perf_counter() - start)


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from bench_samples import detection  # bench/bench_samples.py: the row 25c samples

    import prep as prep_api
    from loaders import SampleDataset, make_loader
    from prep.fields import Array, Image, Text

    out = work / "w-detection"
    if not (out / "manifest.json").is_file():
        paths = [str(p) for p in sorted((work / "raw" / "images").rglob("*.jpg"))]
        fields = {
            "image": Image(sizes=(256,), codec="jpeg"),
            "boxes": Array("float32", (None, 4)),
            "labels": Array("int64", (None,)),
            "caption": Text(),
        }
        prep_api.pack_samples(
            lambda x: detection(*x),
            list(enumerate(paths)),
            out,
            fields,
            jobs=args.jobs,
            overwrite=True,
            show_progress=False,
        )
    ds = SampleDataset(out, ragged="list")
    reused = {w: make_loader(ds, BATCH, shuffle=True, num_workers=w) for w in (0, 2)}
    for loader in reused.values():
        _rate(loader)  # workers started, files in the page cache
    best: dict[str, float] = {}
    for _ in range(max(2, args.reps)):
        for w, loader in reused.items():
            fresh = _rate(make_loader(ds, BATCH, shuffle=True, num_workers=w))
            best[f"fresh {w}"] = max(best.get(f"fresh {w}", 0.0), fresh)
            best[f"reused {w}"] = max(best.get(f"reused {w}", 0.0), _rate(loader))
    return [
        versus(
            f"{row} detection, 2 workers vs 0, {kind}",
            best[f"{kind} 2"],
            best[f"{kind} 0"],
            "img/s",
            ">= 1.0x",
        )
        for row, kind in (("40g", "reused"), ("40h", "fresh"))
    ]
