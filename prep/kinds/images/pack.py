"""prep pack: the images kind of the run driver; each shard task decodes an input once and writes
every size."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Array, Field, Image, Label, Mask, Text
from loaders.fields.base import encode_source
from loaders.fields.scores import (
    SHAPE_ISSUES,
    SHAPE_THRESHOLDS,
    Scores,
    shape_reference,
    shape_scores,
)
from loaders.format import ArraySpec, array_name
from loaders.format.spec import crc32, smallest_uint
from prep.kinds.images.config import PackConfig
from prep.media.image.decode import decode_image, decode_mask
from prep.media.image.geometry import PixelSums, combine, sizes_from, stored
from prep.media.image.groups import image_phash, pixel_digest
from prep.media.image.quality import (
    PIXEL_ISSUES,
    SIDE,
    THRESHOLDS,
    Tally,
    flagged,
    pixel_scores,
    scored_copy,
    stored_issues,
)
from prep.run.driver import run
from prep.run.errors import PrepError
from prep.run.grow import Parent, counts_added, grown_classes
from prep.run.inputs import Reject
from prep.run.kind import Inputs, Kind, array_specs, fingerprint
from prep.run.sharding import split_shards
from prep.run.shardwriter import shard_task, write_shard
from prep.run.summary import RunSummary
from prep.sources.images import Item, list_images, split_counts


def image_fields(
    cfg: PackConfig, classes: list[str] | None, max_label: int | None, masks: bool
) -> dict[str, Field]:
    """`image` at every size, its `mask`, the `label` (class names, or integers in the smallest
    dtype), `orig_size`, `source`, and (prep.inspect.dupes) the pHash and pixel digest."""
    sizes = tuple(sorted(cfg.sizes))
    codecs = tuple(cfg.codecs_by_size()[s] for s in sizes)
    codec = codecs[0] if len(set(codecs)) == 1 else codecs
    image = Image(sizes, cfg.mode, codec, cfg.gray, cfg.quality, cfg.pad_value, cfg.max_pixels)
    fields: dict[str, Field] = {"image": image}
    if masks:
        fields["mask"] = Mask("image", sizes, cfg.mode, cfg.mask_pad_value)
    if classes is not None:
        fields["label"] = Label(tuple(classes))
    elif max_label is not None:
        fields["label"] = Label(dtype=smallest_uint(max_label))
    fields["orig_size"] = Array("uint32", (2,), wide=True)
    fields["source"] = Text()  # the input's path, relative to SRC
    if cfg.hashes:
        fields["phash"] = Array("uint64", (), wide=True)
        fields["digest"] = Array("uint8", (32,))
    if cfg.quality_scores:
        names = stored_issues(cfg.gray)
        fields["quality"] = Scores(names, tuple(THRESHOLDS[n] for n in names))
        fields["colour"] = Array("uint8", (6,))  # RGB means and stds: prep issues' outliers
    return fields


def quality_of(
    item: Item,
    img: np.ndarray,
    contents: list[np.ndarray],
    upright: tuple[int, int],
    cfg: PackConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """The stored pixel issues' scores (of scored_copy) and the colour statistics; Reject for an
    issue --drop-issues names."""
    if min(img.shape[:2]) < min(SIDE, *upright):  # a JPEG drafted below SIDE for small --sizes
        img, _ = decode_image(
            item.path, (SIDE,), cfg.gray, cfg.max_pixels, "fill", cfg.background_rgb()
        )
        contents = []
    names = stored_issues(cfg.gray)
    every, colour = pixel_scores(scored_copy(img, contents))
    scores = every[[PIXEL_ISSUES.index(n) for n in names]]
    drop = [n for n in flagged(scores, names) if n in cfg.drop_list()]
    if drop:
        k = names.index(drop[0])
        raise Reject(
            f"quality_{drop[0]}",
            f"{drop[0]}: score {scores[k]:.3f} is under {THRESHOLDS[drop[0]]} "
            f"(--drop-issues {cfg.drop_issues})",
        )
    return scores, colour


def encode_item(
    item: Item,
    cfg: PackConfig,
    specs: dict[str, ArraySpec],
    sums: PixelSums | None = None,
    phash: int | None = None,
    diffs: list[int] | None = None,
    tally: Tally | None = None,
) -> dict[str, np.ndarray]:
    """One input -> its arrays, else Reject. `sums` counts the pixels; `phash`: if known;
    `diffs`: --decode cuda's differences from the CPU's pixels (decode_nvjpeg); `tally` counts
    the quality issues."""
    mode, bg, sizes = cfg.mode, cfg.background_rgb(), tuple(cfg.sizes)
    args = (cfg.gray, cfg.max_pixels, mode, bg, cfg.decode, diffs)
    img, upright = decode_image(item.path, sizes, *args)
    out: dict[str, np.ndarray] = {}
    contents: list[np.ndarray] = []
    pixels = sizes_from(img, upright, cfg.sizes, mode, cfg.pad_value, contents=contents)
    for s, arr in pixels.items():
        name = array_name("image", s)
        out[name] = stored(arr[..., None] if cfg.gray else arr, specs[name], cfg.quality)
        if mode == "keep":
            out[array_name("image_hw", s)] = np.asarray(arr.shape[:2], dtype=np.uint16)
        if specs[name].codec == "jpeg":
            crc = crc32(out[name].data)
            out[array_name("image_crc", s)] = np.asarray(crc, dtype=np.uint32)
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
        for s, m in sizes_from(mask, upright, cfg.sizes, mode, cfg.mask_pad_value, True).items():
            name = array_name("mask", s)
            out[name] = stored(m, specs[name], cfg.quality)
    if "label" in specs:
        out["label"] = np.asarray(item.label, dtype=specs["label"].dtype)
    out["orig_size"] = np.asarray(upright, dtype=np.uint32)
    out["source"] = encode_source(item.rel)
    if "phash" in specs:  # from the decoded upright pixels: whatever the stored sizes
        out["phash"] = np.asarray(image_phash(img) if phash is None else phash, dtype=np.uint64)
        # The smallest size's pixels, not the file's bytes: a sha256 of a photo's 3 MB cost
        # 7% of the pack on the bench photos, of 64-256 px 0-2% (docs/looking.md, "Near-duplicates
        # and leakage").
        out["digest"] = pixel_digest(pixels[min(pixels)])
    if "quality" in specs:  # after the hash: its grey copy and resizes warm the same code
        out["quality"], out["colour"] = quality_of(item, img, contents, upright, cfg)
    if sums is not None:
        sums.add(pixels)
    if tally is not None and "quality" in out:
        tally.add(out["quality"], upright)
    return out


@shard_task
def pack_shard(
    index: int,
    items: list[Item],
    cfg: PackConfig,
    specs: dict[str, ArraySpec],
    staging: Path,
    phashes: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Encode `items` into shard `index`; its record. `phashes`: by --drop-dupes."""
    import cv2

    cv2.setNumThreads(1)  # one task per core already
    sums = PixelSums()  # the pixel statistics of the manifest's extra.stats
    diffs: list[int] = []  # --decode cuda: each JPEG's largest difference from the CPU's
    tally = Tally(stored_issues(cfg.gray))  # extra.quality's counts

    def encode(item: Item) -> dict[str, np.ndarray]:
        return encode_item(item, cfg, specs, sums, (phashes or {}).get(item.rel), diffs, tally)

    def extra() -> dict[str, Any]:
        out: dict[str, Any] = {"stats": sums.record()}
        if cfg.decode == "cuda":
            out["decode_diffs"] = [len(diffs), sum(diffs), max(diffs, default=0)]
        if cfg.quality_scores:
            out["quality"] = tally.record()
        return out

    return write_shard(index, items, encode, specs, cfg.format, staging, extra)


class ImagesKind(Kind[PackConfig, list[Item]]):
    command = "pack"
    task = staticmethod(pack_shard)
    appendable = True
    threads = True  # decoding, resizing, hashing and writing release the GIL
    # --drop-dupes and --drop-issues: not counted by --max-rejects
    chosen_rejects = frozenset({"duplicate", *(f"quality_{n}" for n in PIXEL_ISSUES)})
    show_progress = True  # the --drop-dupes hashing pass's bar (the driver has the shards')
    phashes: dict[str, int] | None = None  # --drop-dupes: the kept inputs' hashes

    def sources(self) -> list[Path]:
        return [Path(p) for p in (self.cfg.src, self.cfg.masks) if p]

    def list_inputs(self) -> Inputs:
        cfg = self.cfg
        # Absolute: the tasks may run on other machines (--backend dask), in other folders.
        masks = Path(cfg.masks).absolute() if cfg.masks else None
        src = Path(str(cfg.src)).absolute()
        listing = list_images(src, masks, cfg.limit, cfg.split_names(), cfg.val_fraction)
        self.listing = listing
        if not listing.items:
            raise PrepError(
                f"no usable images in {cfg.src} ({len(listing.rejects)} rejected). "
                "HINT: SRC holds class folders of .jpg/.png files, or is a .csv/.jsonl list"
            )
        max_label = max((it.label for it in listing.items if it.label is not None), default=None)
        has_masks = any(it.mask is not None for it in listing.items)
        self.fields = image_fields(cfg, listing.classes, max_label, has_masks)
        self.specs = array_specs(self.fields, self.cfg)
        # The inputs as --resume compares them (the config holds --drop-dupes): the files, and a
        # list's labels, masks and classes.
        said = [
            (it.rel, it.label, str(it.mask) if it.mask else None, it.split) for it in listing.items
        ]
        digest = fingerprint([listing.fingerprint, said, listing.classes])
        if cfg.drop_dupes:
            from prep.kinds.images.dupes import drop_dupes

            listing.items, dropped, self.phashes = drop_dupes(
                listing.items, cfg, self.show_progress
            )
            listing.rejects += dropped
        return Inputs(len(listing.items), listing.rejects, digest)

    def identities(self) -> dict[str, str]:
        """An input's file (and mask) size and time, its label's name and split."""
        stats = {name: f"{size}:{mtime}" for name, size, mtime in self.listing.fingerprint}
        classes = self.listing.classes
        return {
            it.rel: json.dumps(
                [
                    stats.get(it.rel),
                    stats.get(f"{it.rel} mask"),
                    classes[it.label] if classes and it.label is not None else it.label,
                    it.split,
                ]
            )
            for it in self.listing.items
        }

    def grow(self, parent: Parent, fresh: set[str]) -> int:
        listing, self.parent = self.listing, parent
        old = parent.manifest.fields.get("label", {}).get("classes")
        if listing.classes is not None and isinstance(old, list):  # old ids never change
            classes = grown_classes(old, listing.classes)
            new_id = [classes.index(c) for c in listing.classes]
            listing.items = [
                it if it.label is None else dataclasses.replace(it, label=new_id[it.label])
                for it in listing.items
            ]
            listing.classes = classes
        listing.items = [it for it in listing.items if it.rel in fresh]
        max_label = max((it.label for it in listing.items if it.label is not None), default=None)
        masks = "mask" in parent.manifest.fields
        self.fields = image_fields(self.cfg, listing.classes, max_label, masks)
        was = parent.manifest.fields.get("label", {})
        ids = listing.classes is None and bool(was.get("dtype"))
        if ids and max_label is not None and max_label <= np.iinfo(was["dtype"]).max:
            # integer ids that fit keep the dataset's dtype
            self.fields["label"] = Label(dtype=was["dtype"])
        self.specs = array_specs(self.fields)
        return len(listing.items)

    def plan(self) -> list[list[Item]]:
        items = self.listing.items
        if self.cfg.shuffle_seed is not None:
            # Shards then hold every class, so shard-aware (quasi-random) loading mixes classes.
            order = np.random.default_rng(self.cfg.shuffle_seed).permutation(len(items))
            items = [items[i] for i in order]
        self.input_bytes = {name: n for name, n, _ in self.listing.fingerprint}
        splits: list[str | None] = [*self.listing.splits] if self.listing.splits else [None]
        return split_shards(items, splits, self.cfg.shard_size)

    def cost(self, shard: list[Item]) -> int:
        return sum(self.input_bytes.get(it.rel, 0) for it in shard)  # decode time follows bytes

    def task_args(self, index: int, shard: list[Item], staging: Path) -> tuple[Any, ...]:
        known = self.phashes  # an input the hashing pass could not decode has none
        phashes = (
            None if known is None else {it.rel: known[it.rel] for it in shard if it.rel in known}
        )
        return (index, shard, self.cfg, self.specs, staging, phashes)

    def reusable(self, record: dict[str, Any]) -> bool:
        if self.cfg.quality_scores and record.get("quality") is None:
            return False  # packed with --no-quality, or before it: redone
        return record.get("stats") is not None  # a shard of a prep before pixel stats: redone

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        extra: dict[str, Any] = {"background": list(self.cfg.background_rgb())}
        stats = combine(self.before(records))  # per-channel mean and std (of exact sums)
        if stats is not None:
            extra["stats"] = {"image": stats}
        if self.cfg.decode == "cuda":  # nvJPEG's pixels against libjpeg-turbo's, in levels
            found = [r["decode_diffs"] for r in records if r.get("decode_diffs")]
            n, total = sum(f[0] for f in found), sum(f[1] for f in found)
            worst = max((f[2] for f in found), default=0)
            extra["decode"] = {"device": "cuda", "jpegs": n, "max_diff": worst}
            extra["decode"]["mean_max_diff"] = total / n if n else 0.0
        if self.cfg.quality_scores:  # an append's: of the old shards too (grow.trimmed)
            extra["quality"] = quality_summary(self.before(records))
        splits = split_counts(self.listing, records)
        if self.parent is not None and splits:  # the new samples' counts added to the old
            before = self.parent.manifest.extra.get("splits")
            splits = {"splits": counts_added(before, splits["splits"])}
        return extra | splits


def quality_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """`extra.quality`: each issue's count of flagged samples, and the shape reference (of the
    whole dataset's upright sizes) that odd_size and odd_aspect are scored against."""
    counts: dict[str, int] = {}
    records = [r for r in records if r.get("quality")]  # a shard packed before issue 39: none
    for r in records:
        for name, n in r["quality"]["flagged"].items():
            counts[name] = counts.get(name, 0) + n
    hw = np.array([p for r in records for p in r["quality"]["hw"]], np.float64).reshape(-1, 2)
    ref = shape_reference(hw)
    odd = (shape_scores(hw, ref) < np.asarray(SHAPE_THRESHOLDS, np.float32)).sum(axis=0)
    counts |= {n: int(c) for n, c in zip(SHAPE_ISSUES, odd.tolist(), strict=True)}
    return {"field": "quality", "issues": counts, "shape": ref}


def pack(cfg: PackConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    """Pack cfg.src into cfg.out; `profile`: the summary's `stages` (prep.run.profile)."""
    kind = ImagesKind(cfg)
    kind.show_progress = show_progress
    return run(kind, show_progress, profile)
