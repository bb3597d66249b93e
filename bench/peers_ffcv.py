"""bench/peers.py's FFCV rows (issue 40): prep's ImageShardDataset against FFCV's JPEG field on
the same JPEG bytes (peers.py's 2,000 256 px q90 images), each sample's index beside its image.

FFCV decodes with libjpeg-turbo's fast integer IDCT and fancy (smooth) chroma upsampling: its
pixels equal simplejpeg's fastdct=True exactly. prep decodes accurately by default;
fast_dct=True takes the fast IDCT and the fast (replicating) chroma upsampling, so on these 4:2:0
JPEGs its pixels differ from FFCV's at sharp colour edges. Both of prep's are timed.

Rows: prep's defaults (0 workers, decode threads up to 4 cores) against FFCV's 2 threads; prep's
one decode thread against FFCV's 1; prep's 2 workers against FFCV's 2 threads. Fresh: a new
loader each epoch, timed from its first batch asked for as in peers.py (a new FFCV Loader
compiles its pipeline on its first batch; the first in a process also compiles FFCV's own code,
done before timing); reused: one loader, its second epoch on. Interleaved rounds, the median of
each; beside them, each system's seconds to make a loader and to its first batch, and its CPU
time an image (all its threads and workers), which a loaded machine disturbs less than img/s.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import psutil
import simplejpeg
import torch

BATCH, SIDE = 256, 256  # as peers.py, which imports this module
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
    except (ImportError, OSError) as e:  # OSError: its extension's libraries not found
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


class Epoch(NamedTuple):
    rate: float  # img/s
    first: float  # seconds to the first batch
    cpu: float  # CPU seconds an image, the process's threads and its workers
    made: float = 0.0  # seconds to make the loader (fresh), not in `rate`


def cpu_seconds() -> float:
    """User and system CPU of this process, its live workers and those it waited for."""
    me = psutil.Process()
    t = me.cpu_times()
    live = 0.0
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a worker gone meanwhile
            live += sum(child.cpu_times()[:2])
    return t.user + t.system + t.children_user + t.children_system + live


def epoch(loader: Any) -> Epoch:
    n, cpu, start, first = 0, cpu_seconds(), time.perf_counter(), 0.0
    for images, _ in loader:
        first = first or time.perf_counter() - start
        n += len(images)
    wall = time.perf_counter() - start
    return Epoch(n / wall, first, (cpu_seconds() - cpu) / n)


Runs = dict[tuple[str, str], list[Epoch]]


def measure(made: dict[str, Make], reps: int) -> Runs:
    """Each system's epochs, fresh and reused, in interleaved rounds."""
    reused = {name: make() for name, make in made.items()}
    for loader in reused.values():
        epoch(loader)  # workers started, pipelines compiled, files in the page cache
    got: Runs = {}
    for _ in range(reps):
        for name, loader in reused.items():
            start = time.perf_counter()
            fresh = made[name]()
            took = time.perf_counter() - start
            got.setdefault((name, "fresh"), []).append(epoch(fresh)._replace(made=took))
            got.setdefault((name, "reused"), []).append(epoch(loader))
    return got


def median(got: Runs, name: str, kind: str, what: str) -> float:
    return statistics.median(getattr(e, what) for e in got[name, kind])


def table(got: Runs) -> Iterator[str]:
    yield "| prep vs FFCV | fresh loader | reused loader |"
    yield "|---|---|---|"
    for row, _, threads in SETTINGS:
        for fast in (False, True):
            mine, theirs = ours(fast, row), f"ffcv {threads}"
            cells = []
            for k in ("fresh", "reused"):
                a, b = median(got, mine, k, "rate"), median(got, theirs, k, "rate")
                cells.append(f"{a / b:.2f}x ({a:,.0f} vs {b:,.0f} img/s)")
            yield f"| {row}{', fast_dct' * fast} | {' | '.join(cells)} |"


def costs(got: Runs) -> Iterator[str]:
    """Each system's median time to its first batch and CPU time an image."""
    for name in dict.fromkeys(name for name, _ in got):
        first, cpu = (
            [f"{median(got, name, k, what) * scale:.{digits}f}" for k in ("fresh", "reused")]
            for what, scale, digits in (("first", 1, 2), ("cpu", 1e6, 0))
        )
        made = median(got, name, "fresh", "made")
        yield (
            f"{name}: made in {made:.2f} s; first batch {first[0]} s fresh, {first[1]} s reused;"
            f" CPU {cpu[0]} us/img fresh, {cpu[1]} reused"
        )


def decodes(stored: list[dict[str, Any]], root: Path, reps: int) -> Iterator[str]:
    """CPU time an image on this thread: each decoder over the stored JPEGs, then prep's dataset
    batches (one decode thread, no loader), interleaved rounds, the median of each."""
    from ffcv.libffcv import imdecode

    from loaders import ImageShardDataset

    srcs = [np.frombuffer(s["image"], np.uint8) for s in stored]
    out = np.empty((SIDE, SIDE, 3), np.uint8)

    def ffcv() -> None:
        for src in srcs:
            imdecode(src, out, SIDE, SIDE, SIDE, SIDE, 0, 0, 1, 1, False, False)

    def simple(dct: bool, upsample: bool) -> None:
        for src in srcs:
            simplejpeg.decode_jpeg(src, fastdct=dct, fastupsample=upsample, buffer=out)

    def batches(ds: Any) -> None:
        order = np.random.default_rng(0).permutation(len(ds)).tolist()
        for i in range(0, len(order), BATCH):
            ds.__getitems__(order[i : i + BATCH])

    runs: dict[str, Callable[[], None]] = {
        "FFCV's imdecode (fast IDCT)": ffcv,
        "simplejpeg, accurate": partial(simple, False, False),
        "simplejpeg, fastdct": partial(simple, True, False),
        "simplejpeg, fastdct and fastupsample": partial(simple, True, True),
    }
    for fast in (False, True):
        ds = ImageShardDataset(root, size=SIDE, fields=("image", "index"), fast_dct=fast, threads=1)
        runs[f"prep's dataset batches{', fast_dct' * fast}, no loader"] = partial(batches, ds)
    took: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            start = time.thread_time()
            run()
            took[name].append((time.thread_time() - start) / len(srcs))
    for name, seconds in took.items():
        yield f"{name}: {statistics.median(seconds) * 1e6:.0f} us/img CPU, one thread"


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
    for line in [*decodes(stored, work / "prep", reps), *costs(got)]:
        print(f"   {line}", file=sys.stderr)
    yield from table(got)
