"""prep pack: plan shards from the sorted inputs, run one joblib task per shard, manifest last.

A run builds OUT.partial/ beside OUT. Each task decodes its inputs once, writes every requested
size to temp files, renames them, then records the shard as done (.prep-run/NNNNN.json). The
parent only gathers those small records; when all shards are done it writes rejects.jsonl and
manifest.json, then swaps OUT.partial into place. A killed run is finished by `--resume`, which
redoes only the shards without a verified record.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import (
    MANIFEST,
    REJECTS,
    ArrayRef,
    ArraySpec,
    FileInfo,
    Manifest,
    Shard,
    array_name,
    read_manifest,
)
from prep import PrepError, __version__
from prep.config import PackConfig
from prep.kinds.images.decode import BACKGROUND, Reject, decode_image, decode_mask, sizes_from
from prep.kinds.images.sources import Item, list_images
from prep.run.files import NpyWriter, atomic_write_text, named, sha256_file, smallest_uint
from prep.run.inputs import reject_record
from prep.run.parallel import ShardProgress, check_backend, run_tasks
from prep.run.profile import StageTimer, run_profiled, stage
from prep.run.staging import (
    cleanup_temps,
    finished,
    install,
    load_record,
    prepare_staging,
    shard_task,
    write_error,
    write_record,
    write_rejects,
)


@dataclass
class PackSummary:
    out: Path
    inputs: int
    packed: int
    rejected: int
    shards: int
    reused: int
    bytes: int
    seconds: float
    stages: dict[str, float] | None = None  # with profile=True: seconds per stage, all workers

    def line(self) -> str:
        rate = self.packed / self.seconds if self.seconds else 0.0
        return (
            f"{self.out}: {self.inputs} inputs, {self.packed} packed, {self.rejected} rejected, "
            f"{self.shards} shards ({self.reused} reused), {self.bytes / 1e6:.1f} MB written, "
            f"{self.seconds:.1f} s, {rate:.0f} items/s"
        )


def plan_shards(items: list[Item], shard_size: int) -> list[list[Item]]:
    return [items[i : i + shard_size] for i in range(0, len(items), shard_size)]


def array_specs(cfg: PackConfig, max_label: int | None, masks: bool) -> dict[str, ArraySpec]:
    """Every array of the dataset: images and masks per size, then the size-free fields."""
    channels = 1 if cfg.gray else 3
    specs: dict[str, ArraySpec] = {}
    for s in cfg.sizes:
        specs[array_name("image", s)] = ArraySpec("image", s, "uint8", (s, s, channels))
        if masks:
            specs[array_name("mask", s)] = ArraySpec("mask", s, "uint8", (s, s))
    if max_label is not None:
        specs["label"] = ArraySpec("label", None, smallest_uint(max_label), ())
    # uint32: source sides above 65535 px exist (panoramas, slides).
    specs["orig_size"] = ArraySpec("orig_size", None, "uint32", (2,))
    return specs


def encode_item(item: Item, cfg: PackConfig, specs: dict[str, ArraySpec]) -> dict[str, np.ndarray]:
    """One input -> one sample per array. Raises Reject for an input that cannot be used."""
    img, upright = decode_image(item.path, tuple(cfg.sizes), cfg.gray, cfg.max_pixels, cfg.mode)
    out: dict[str, np.ndarray] = {}
    for s, arr in sizes_from(img, upright, cfg.sizes, cfg.mode, cfg.pad_value).items():
        out[array_name("image", s)] = arr[..., None] if cfg.gray else arr
    if item.mask is not None:
        try:
            mask = decode_mask(item.mask, cfg.max_pixels)
        except Reject as r:
            raise Reject(
                r.code if r.code.startswith("mask") else f"mask_{r.code}",
                f"mask {item.mask.name}: {r.message}",
            ) from r
        if mask.shape != upright:
            raise Reject(
                "mask_size",
                f"mask {item.mask.name} is {mask.shape[1]}x{mask.shape[0]}, "
                f"image is {upright[1]}x{upright[0]}",
            )
        for s, m in sizes_from(
            mask, upright, cfg.sizes, cfg.mode, cfg.mask_pad_value, True
        ).items():
            out[array_name("mask", s)] = m
    if "label" in specs:
        out["label"] = np.asarray(item.label, dtype=specs["label"].dtype)
    out["orig_size"] = np.asarray(upright, dtype=np.uint32)
    return out


def _write_h5(path: Path, parts: dict[str, Path]) -> None:
    """Copy the shard's temp .npy arrays into one contiguous, uncompressed HDF5 file."""
    import h5py

    with h5py.File(path, "w") as f:
        for name, npy in parts.items():
            src = np.load(npy, mmap_mode="r", allow_pickle=False)
            ds = f.create_dataset(name, shape=src.shape, dtype=src.dtype, track_times=False)
            step = max(1, (64 << 20) // max(1, src[:1].nbytes))  # 64 MB at a time
            for start in range(0, len(src), step):
                ds[start : start + step] = src[start : start + step]
        f.flush()
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


@shard_task
def pack_shard(
    index: int, items: list[Item], cfg: PackConfig, specs: dict[str, ArraySpec], staging: Path
) -> dict[str, Any]:
    """The joblib task: encode `items` into shard `index` under `staging`; return its record.

    Memory holds one sample at a time whatever the shard size; no pixels leave the process.
    A failed write raises PrepError naming the file and leaves no file of the shard behind."""
    import cv2

    cv2.setNumThreads(1)  # one task per core already
    stem = f"{index:05d}"
    # Temp names are per process: a worker the dead parent left running cannot write into the
    # files of the --resume run redoing the same shard (both would write the same bytes).
    tmp = {name: staging / f".{name}-{stem}.{os.getpid()}.npy.tmp" for name in specs}
    with stage("write"):
        writers = {name: NpyWriter(tmp[name], s.dtype, s.shape) for name, s in specs.items()}
    rejects: list[dict[str, Any]] = []
    try:
        for item in items:
            try:
                sample = encode_item(item, cfg, specs)
            except Reject as r:
                rejects.append(reject_record(item.rel, r.code, r.message))
                continue
            with stage("write"):
                for name, w in writers.items():
                    w.append(sample[name])
        with stage("write"):
            for w in writers.values():
                w.close()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    count = len(items) - len(rejects)
    if cfg.format == "h5":
        final = f"shard-{stem}.h5"
        h5tmp = staging / f".{final}.{os.getpid()}.tmp"
        try:
            with stage("write"):
                _write_h5(h5tmp, tmp)
        except BaseException as e:
            for p in (h5tmp, *tmp.values()):
                p.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise named(e, h5tmp) from e
            raise
        for p in tmp.values():
            p.unlink()
        renames = {h5tmp: final}
        arrays = {name: ArrayRef(final, count, name) for name in specs}
    else:
        renames = {tmp[name]: f"{name}-{stem}.npy" for name in specs}
        arrays = {name: ArrayRef(f"{name}-{stem}.npy", count) for name in specs}
    files = {}
    for src, final in renames.items():
        os.replace(src, staging / final)
        with stage("checksum"):
            digest = sha256_file(staging / final)
        files[final] = FileInfo((staging / final).stat().st_size, digest)
    record = {"index": index, "shard": asdict(Shard(count, arrays, files)), "rejects": rejects}
    with stage("write"):
        write_record(staging, index, record)
    return record


def pack(cfg: PackConfig, show_progress: bool = True, profile: bool = False) -> PackSummary:
    """Pack cfg.src into cfg.out; see the module docstring for the guarantees.

    `profile`: the summary's `stages` holds the seconds per stage of this run (prep.run.profile)."""
    cfg.validate()
    check_backend(cfg.backend, cfg.scheduler)
    start = time.perf_counter()
    # Absolute: the tasks may run on other machines (--backend dask), in other folders.
    src, out = Path(str(cfg.src)).absolute(), Path(str(cfg.out))
    occupied = out.exists() and (not out.is_dir() or any(out.iterdir()))
    if occupied and not (cfg.overwrite or cfg.resume):
        prepare_staging(out, {}, cfg.overwrite, cfg.resume)  # fail before listing
    timer = StageTimer()
    with timer.stage("list"):
        listing = list_images(src, Path(cfg.masks).absolute() if cfg.masks else None, cfg.limit)
    if not listing.items:
        raise PrepError(
            f"no usable images in {src} ({len(listing.rejects)} rejected). "
            "HINT: SRC holds class folders of .jpg/.png files, or is a .csv/.jsonl list"
        )
    labels = [it.label for it in listing.items if it.label is not None]
    max_label = max(labels, default=None)
    if listing.classes is not None:
        max_label = len(listing.classes) - 1
    has_masks = any(it.mask is not None for it in listing.items)
    specs = array_specs(cfg, max_label, has_masks)
    # What the output depends on besides the config: the files (names, sizes, times) and what
    # a list says of them (labels, masks, class names), so --resume never reuses a stale shard.
    said = [(it.rel, it.label, str(it.mask) if it.mask else None) for it in listing.items]
    inputs = hashlib.sha256(json.dumps([listing.fingerprint, said, listing.classes]).encode())
    plan = {
        "config": cfg.output_config(),
        "inputs": inputs.hexdigest(),
        "count": len(listing.items),
    }
    if cfg.resume and not cfg.overwrite and finished(out, plan):
        return _already_done(out, start)  # killed after the swap: nothing left to do
    staging = prepare_staging(out, plan, cfg.overwrite, cfg.resume)
    items = listing.items
    if cfg.shuffle_seed is not None:
        # Shards then hold every class, so shard-aware (quasi-random) loading mixes classes.
        order = np.random.default_rng(cfg.shuffle_seed).permutation(len(items))
        items = [items[i] for i in order]
    shards = plan_shards(items, cfg.shard_size)
    records: dict[int, dict[str, Any]] = {}
    for i in range(len(shards)):
        rec = load_record(staging, i, verify=True) if cfg.resume else None
        if rec is not None:
            records[i] = rec
    reused = len(records)

    parent = os.getpid() if cfg.backend == "loky" else None  # see prep.run.staging.exit_with_parent
    todo = [
        (i, shards[i], cfg, specs, staging.absolute(), parent)
        for i in range(len(shards))
        if i not in records
    ]
    # Largest shards first, by input bytes (decode time follows them): the last tasks are the
    # short ones, so no core waits long for the last shard. The output does not change.
    input_bytes = {name: size for name, size, _ in listing.fingerprint}
    todo.sort(key=lambda t: -sum(input_bytes.get(it.rel, 0) for it in t[1]))
    bar = (
        ShardProgress(sum(len(t[1]) for t in todo), len(todo), "img", f"pack {out.name}")
        if show_progress
        else None
    )
    task = functools.partial(run_profiled, profile, pack_shard)
    try:
        for rec in run_tasks(task, todo, cfg.n_jobs, cfg.backend, cfg.scheduler):
            timer.add(rec.pop("stages", {}))
            records[rec["index"]] = rec
            if bar is not None:
                bar.shard_done(len(shards[rec["index"]]))
    except BaseException:
        cleanup_temps(staging)
        raise
    finally:
        if bar is not None:
            bar.close()
    try:
        summary = _finish(
            cfg,
            out,
            staging,
            listing.rejects,
            records,
            specs,
            listing.classes,
            len(listing.items) + len(listing.rejects),
            reused,
            start,
            inputs.hexdigest(),
        )
    except OSError as e:
        raise write_error(e, str(staging)) from e
    summary.stages = timer.seconds if profile else None
    return summary


def _already_done(out: Path, start: float) -> PackSummary:
    m = read_manifest(out)
    total = sum(f.bytes for s in m.shards for f in s.files.values())
    n = len(m.shards)
    return PackSummary(
        out,
        m.num_samples + m.rejects,
        m.num_samples,
        m.rejects,
        n,
        n,
        total,
        time.perf_counter() - start,
    )


def _finish(
    cfg: PackConfig,
    out: Path,
    staging: Path,
    list_rejects: list[dict[str, Any]],
    records: dict[int, dict[str, Any]],
    specs: dict[str, ArraySpec],
    classes: list[str] | None,
    n_inputs: int,
    reused: int,
    start: float,
    inputs: str,
) -> PackSummary:
    ordered = [records[i] for i in sorted(records)]
    # By name, as the inputs are listed: the same file whatever the order shards finished in.
    rejects = write_rejects(staging, list_rejects + [r for rec in ordered for r in rec["rejects"]])
    if n_inputs and len(rejects) / n_inputs > cfg.max_rejects:
        reasons = Counter(r["reason"] for r in rejects).most_common()
        raise PrepError(
            f"{len(rejects)} of {n_inputs} inputs rejected ({len(rejects) / n_inputs:.1%} > "
            f"--max-rejects {cfg.max_rejects:g}: "
            + ", ".join(f"{n} {reason}" for reason, n in reasons)
            + f"); each is a line of {staging / REJECTS}. HINT: rerun with --resume and a "
            "higher --max-rejects to keep the rest (finished shards are reused), or fix the "
            "inputs and rerun with --overwrite"
        )
    manifest = Manifest(
        kind="images",
        storage=cfg.format,
        arrays=specs,
        shards=[Shard.from_dict(rec["shard"]) for rec in ordered],
        config=cfg.output_config(),
        classes=classes,
        rejects=len(rejects),
        tool_version=__version__,
        extra={"background": list(BACKGROUND), "inputs": inputs},  # as the plan: see finished()
    )
    atomic_write_text(staging / MANIFEST, manifest.to_json())
    install(staging, out)
    total = sum(f.bytes for s in manifest.shards for f in s.files.values())
    return PackSummary(
        out,
        n_inputs,
        manifest.num_samples,
        len(rejects),
        len(ordered),
        reused,
        total,
        time.perf_counter() - start,
    )
