"""bench/peers.py's FFCV rows (issue 40): prep's ImageShardDataset against FFCV's JPEG field on
the same JPEG bytes (peers.py's 2,000 256 px q90 images), each sample's index beside its image.

FFCV decodes with libjpeg-turbo's fast integer IDCT and fancy (smooth) chroma upsampling: its
pixels equal simplejpeg's fastdct=True exactly. prep decodes accurately by default;
fast_dct=True takes the fast IDCT and the fast (replicating) chroma upsampling, so on these 4:2:0
JPEGs its pixels differ from FFCV's at sharp colour edges. Both of prep's are timed.

Rows: prep's defaults (0 workers, decode threads up to 4 cores) against FFCV's 2 threads; prep's
one decode thread against FFCV's 1; prep's 2 workers against FFCV's 2 threads. Fresh: a new
loader each epoch (a new FFCV Loader compiles its pipeline; its first ever in a process also
compiles FFCV's own code, done before timing); reused: one loader, its second epoch on.
Interleaved rounds, the median of each.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
import torch

BATCH, SIDE = 256, 256
# (row, prep's make_loader / ImageShardDataset options, FFCV's threads)
SETTINGS: tuple[tuple[str, dict[str, int], int], ...] = (
    ("prep defaults (0 workers) vs FFCV 2 threads", {}, 2),
    ("1 decode thread vs FFCV 1 thread", {"threads": 1}, 1),
    ("2 workers vs FFCV 2 threads", {"num_workers": 2}, 2),
)
Make = Callable[[], Any]


def missing() -> str | None:
    """Why FFCV's rows cannot run here, or None."""
    try:
        import ffcv.loader  # noqa: F401
    except ImportError as e:
        return f"ffcv is not importable ({e}): see `python bench/peers.py --help` to install it"
    return None


def write_beton(stored: list[dict[str, Any]], path: Path) -> None:
    """FFCV's dataset of the stored JPEG bytes as they are (its writer would re-encode pixels)."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.fields.rgb_image import IMAGE_MODES
    from ffcv.writer import DatasetWriter

    def as_stored(destination: Any, jpeg: bytes, malloc: Any) -> None:
        destination["mode"] = IMAGE_MODES["jpg"]
        destination["height"] = destination["width"] = SIDE
        destination["data_ptr"], storage = malloc(len(jpeg))
        storage[:] = np.frombuffer(jpeg, np.uint8)

    image = RGBImageField(write_mode="jpg")
    image.encode = as_stored  # not a subclass: the writer looks fields up by type
    part = path.with_suffix(".part")
    writer = DatasetWriter(str(part), {"image": image, "index": IntField()}, num_workers=1)
    writer.from_indexed_dataset([(s["image"], i) for i, s in enumerate(stored)])
    part.rename(path)


def ffcv_loader(path: Path, threads: int) -> Any:
    from ffcv.fields.decoders import IntDecoder, SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import Squeeze, ToTensor, ToTorchImage

    pipelines = {
        "image": [SimpleRGBImageDecoder(), ToTensor(), ToTorchImage()],
        "index": [IntDecoder(), ToTensor(), Squeeze()],
    }
    return Loader(
        str(path),
        batch_size=BATCH,
        num_workers=threads,
        order=OrderOption.RANDOM,
        os_cache=True,
        drop_last=False,
        pipelines=pipelines,
    )


def prep_loader(root: Path, fast: bool, opts: dict[str, int]) -> Any:
    from loaders import ImageShardDataset, make_loader

    threads = opts.get("threads")
    ds = ImageShardDataset(
        root, size=SIDE, fields=("image", "index"), fast_dct=fast, threads=threads
    )
    return make_loader(ds, BATCH, shuffle=True, num_workers=opts.get("num_workers", 0))


def ours(fast: bool, row: str) -> str:
    return f"prep{' fast_dct' * fast}: {row}"


def systems(work: Path) -> dict[str, Make]:
    """Each (system, setting) timed: prep's accurate and fast_dct per setting, FFCV per threads."""
    out: dict[str, Make] = {}
    for row, opts, threads in SETTINGS:
        for fast in (False, True):
            out[ours(fast, row)] = partial(prep_loader, work / "prep", fast, opts)
        out[f"ffcv {threads}"] = partial(ffcv_loader, work / "ffcv.beton", threads)
    return out


def pixels(loader: Any) -> dict[int, torch.Tensor]:
    """An epoch's images by sample index (copied: both systems reuse their batch buffers)."""
    out: dict[int, torch.Tensor] = {}
    for images, index in loader:
        out.update(zip(index.tolist(), images.clone(), strict=True))
    return out


def check(stored: list[dict[str, Any]], made: dict[str, Make]) -> Iterator[str]:
    """Each system hands out each sample once, its pixels simplejpeg's: FFCV's fastdct=True,
    prep's accurate its default, prep's fast_dct fastdct and fastupsample; then how far prep's
    pixels are from FFCV's."""
    epochs = {"ffcv": pixels(made["ffcv 2"]())}
    for fast in (False, True):
        epochs[ours(fast, "")] = pixels(made[ours(fast, SETTINGS[0][0])]())
    flags = {"ffcv": (True, False), "prep: ": (False, False), "prep fast_dct: ": (True, True)}
    for name, got in epochs.items():
        assert sorted(got) == list(range(len(stored))), f"{name}: not each sample once"
        dct, upsample = flags[name]
        for i, s in enumerate(stored):
            want = simplejpeg.decode_jpeg(s["image"], fastdct=dct, fastupsample=upsample)
            assert torch.equal(got[i], torch.from_numpy(want).permute(2, 0, 1)), f"{name}: {i}"
    yield f"all {len(stored)} images: FFCV's pixels are simplejpeg's fastdct=True, prep's as said"
    ffcv = epochs.pop("ffcv")
    for name, got in epochs.items():
        diff = [(got[i].int() - ffcv[i].int()).abs() for i in range(len(stored))]
        same = sum(int(d.max()) == 0 for d in diff)
        yield (
            f"{name[:-2]} vs FFCV: max |difference| {max(int(d.max()) for d in diff)}, mean"
            f" {float(torch.stack([d.float().mean() for d in diff]).mean()):.3f},"
            f" {same} of {len(stored)} images equal"
        )


def epoch(loader: Any) -> tuple[float, float]:
    """img/s of one epoch, and seconds to its first batch."""
    n, start, first = 0, time.perf_counter(), 0.0
    for images, _ in loader:
        first = first or time.perf_counter() - start
        n += len(images)
    return n / (time.perf_counter() - start), first


def measure(made: dict[str, Make], reps: int) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Each system's (img/s, first batch s) per epoch, fresh and reused, interleaved rounds."""
    reused = {name: make() for name, make in made.items()}
    for loader in reused.values():
        epoch(loader)  # workers started, pipelines compiled, files in the page cache
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(reps):
        for name, loader in reused.items():
            got.setdefault((name, "fresh"), []).append(epoch(made[name]()))
            got.setdefault((name, "reused"), []).append(epoch(loader))
    return got


def table(got: dict[tuple[str, str], list[tuple[float, float]]]) -> Iterator[str]:
    def rate(name: str, kind: str) -> float:
        return statistics.median(r for r, _ in got[name, kind])

    yield "| prep vs FFCV | fresh loader | reused loader |"
    yield "|---|---|---|"
    for row, _, threads in SETTINGS:
        for fast in (False, True):
            mine, theirs = ours(fast, row), f"ffcv {threads}"
            cells = [
                f"{rate(mine, k) / rate(theirs, k):.2f}x "
                f"({rate(mine, k):,.0f} vs {rate(theirs, k):,.0f} img/s)"
                for k in ("fresh", "reused")
            ]
            yield f"| {row}{', fast_dct' * fast} | {' | '.join(cells)} |"


def firsts(got: dict[tuple[str, str], list[tuple[float, float]]]) -> Iterator[str]:
    """Each system's median seconds to its first batch, fresh and reused."""
    for name in dict.fromkeys(name for name, _ in got):
        fresh, reused = (statistics.median(f for _, f in got[name, k]) for k in ("fresh", "reused"))
        yield f"{name}: the first batch after {fresh:.2f} s fresh, {reused:.2f} s reused"


def rows(stored: list[dict[str, Any]], work: Path, reps: int) -> Iterator[str]:
    """The FFCV table (its dataset written once), after the pixel checks; a line why not."""
    why = missing()
    if why is not None:
        print(f"   FFCV rows left out: {why}", file=sys.stderr)
        return
    if not (work / "ffcv.beton").is_file():
        write_beton(stored, work / "ffcv.beton")
    made = systems(work)
    for line in check(stored, made):
        print(f"   {line}", file=sys.stderr)
    got = measure(made, reps)
    for line in firsts(got):
        print(f"   {line}", file=sys.stderr)
    yield from table(got)
