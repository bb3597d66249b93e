"""prep volumes: the 3-D kind of the run driver. A task reads its scans one at a time and runs
the steps of prep.media.volume.transform; a shard stores its volumes' voxels ragged
(loaders.fields.volume), their labels on the same offsets."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Volume, VolumeLabel
from loaders.format import ArraySpec
from prep.kinds.volumes.config import VolumeConfig, float_list
from prep.media.volume import transform as tf
from prep.run.classmaps import named_targets
from prep.run.driver import run
from prep.run.errors import PrepError
from prep.run.grow import Parent, file_identity, grown_classes
from prep.run.inputs import Reject
from prep.run.kind import Inputs, Kind, array_specs, fingerprint
from prep.run.profile import stage
from prep.run.sharding import split_shards
from prep.run.shardwriter import shard_task, write_shard
from prep.run.summary import RunSummary
from prep.sources import targets as tg
from prep.sources.volumes import Item, list_volumes, read_pair

MAX_VOXELS = 2**32 - 1  # label_fg holds flat voxel indices as uint32


def geometry(affine: np.ndarray, shape: tuple[int, ...]) -> dict[str, Any]:
    """A grid as the manifest keeps it: shape, spacing, origin, direction and affine (mm)."""
    spacing = tf.spacing_of(affine)
    return {
        "shape": [int(n) for n in shape],
        "spacing": spacing.tolist(),
        "origin": affine[:3, 3].tolist(),
        "direction": (affine[:3, :3] / spacing).tolist(),
        "affine": affine.tolist(),
    }


def encode_volume(
    item: Item, cfg: VolumeConfig
) -> tuple[np.ndarray, np.ndarray | None, dict[str, Any]]:
    """One scan -> (image, label or None, its manifest entry); Reject on bad input."""
    with stage("read"):
        scan, label = read_pair(item, cfg.volume_index)
    with stage("transform"):
        img, affine = tf.reorient(scan.data, scan.affine, cfg.orient)
        lab = None if label is None else tf.reorient(label.data, label.affine, cfg.orient)[0]
        spacing = float_list(cfg.spacing, 3, "--spacing")
        if spacing is not None:
            if lab is not None:
                lab = tf.resample(lab, affine, spacing, linear=False)[0]
            img, affine = tf.resample(img, affine, spacing, linear=True)
        window = float_list(cfg.window, 2, "--window")
        lo_hi = None if window is None else (window[0], window[1])
        img = tf.to_stored(img, cfg.stored_dtype, lo_hi)
        pad = img.min().item()
        boxes = []
        if cfg.crop_foreground:
            lo, hi = tf.foreground_box(img, lab, cfg.margin)
            boxes.append((lo, tuple(int(n) for n in hi - lo)))
        if cfg.shape is not None:
            boxes.append((None, tuple(int(n) for n in float_list(cfg.shape, 3, "--shape") or ())))
        for start, size in boxes:
            start = (np.asarray(img.shape) - size) // 2 if start is None else start  # centred
            img = tf.box(img, start, size, pad)
            lab = None if lab is None else tf.box(lab, start, size, 0)
            affine = tf.translate(affine, start)
    if img.size > MAX_VOXELS:
        raise Reject("too_large", f"{img.size} voxels after resampling; at most {MAX_VOXELS}")
    meta = {"path": item.rel, **geometry(affine, img.shape), "pad": pad}
    meta["source"] = geometry(scan.affine, scan.data.shape)
    return img, lab, meta


@shard_task
def volumes_shard(
    index: int, items: list[Item], cfg: VolumeConfig, specs: dict[str, ArraySpec], staging: Path
) -> dict[str, Any]:
    """Volumes `items` into shard `index`; its record. Memory holds one volume at a time."""
    volumes: list[dict[str, Any]] = []  # the manifest's extra.volumes
    fg_length = 0  # the shard's foreground voxels so far: label_fg_offsets count from 0

    def encode(item: Item) -> dict[str, np.ndarray]:
        nonlocal fg_length
        img, lab, meta = encode_volume(item, cfg)
        sample = {"image": img, "image_shape": np.asarray(img.shape, np.uint32)}
        for j, value in enumerate(item.target or ()):
            sample[tg.array_of(j)] = np.asarray(value, specs[tg.array_of(j)].dtype)
        if lab is not None and "label" in specs:
            with stage("write"):
                voxels, bounds = tf.foreground_index(lab)
            sample |= {"label": lab, "label_fg": voxels}
            sample["label_fg_offsets"] = bounds + fg_length
            fg_length += len(voxels)
        volumes.append(meta)
        return sample

    return write_shard(index, items, encode, specs, "npy", staging, lambda: {"volumes": volumes})


class VolumesKind(Kind[VolumeConfig, list[Item]]):
    command = "volumes"
    unit = "vol"
    noun = "volumes"
    task = staticmethod(volumes_shard)
    appendable = True

    def sources(self) -> list[Path]:
        return [Path(p) for p in (self.cfg.src, self.cfg.labels, self.cfg.targets) if p]

    def list_inputs(self) -> Inputs:
        cfg = self.cfg
        labels = Path(cfg.labels).absolute() if cfg.labels else None
        items, rejects, seen = list_volumes(Path(str(cfg.src)).absolute(), labels)
        self.targets = tg.read_targets(Path(cfg.targets)) if cfg.targets else None
        if self.targets is not None and items:
            listed = [it.rel for it in items] + [str(r["path"]) for r in rejects]
            tg.check_rows(self.targets, {tg.scan_key(rel) for rel in listed})
            st = self.targets.path.stat()
            seen.append((str(self.targets.path.absolute()), st.st_size, st.st_mtime_ns))
        if cfg.limit is not None:
            items = items[: cfg.limit]
        if self.targets is not None:
            items, missing = tg.attach(self.targets, items)
            rejects += missing
        if not items:
            raise PrepError(
                f"no NIfTI scans or DICOM series in {cfg.src} ({len(rejects)} rejected). "
                "HINT: SRC is a folder of .nii/.nii.gz files or of DICOM series folders (one "
                "series of .dcm slices each), or one such file or folder; images (JPEG, PNG) "
                "are packed by prep pack"
            )
        self.items = items
        # `image`, with labels its `label` (class ids and the foreground index), a target a column
        self.fields = {"image": Volume(cfg.stored_dtype, cfg.orient.upper())}
        if labels is not None:
            self.fields["label"] = VolumeLabel("image", foreground=True)
        if self.targets is not None:
            self.fields |= tg.target_fields(self.targets)
        self.specs = array_specs(self.fields, self.cfg)
        self.sizes = {path: size for path, size, _ in seen}
        said = [(it.rel, str(it.label)) for it in items]  # targets: the CSV is in `seen`
        return Inputs(len(items), rejects, fingerprint([seen, said]))

    def identities(self) -> dict[str, str]:
        """A scan's file (or series folder) and its label's: size and time; its targets, a
        class by its name (ids move when a class is added)."""
        columns = self.targets.columns if self.targets is not None else []
        out = {}
        for it in self.items:
            label = file_identity(it.label) if it.label is not None else None
            out[it.rel] = file_identity(
                it.path, None, None, label, named_targets(columns, it.target)
            )
        return out

    def grow(self, parent: Parent, fresh: set[str]) -> int:
        """The new scans; a target's classes grown at the end, its ids renamed."""
        self.parent = parent
        self.items = [it for it in self.items if it.rel in fresh]
        moved: dict[int, list[int]] = {}
        for j, c in enumerate(self.targets.columns if self.targets is not None else []):
            was = (parent.manifest.fields.get(tg.array_of(j)) or {}).get("vocab")
            if c.classes and isinstance(was, list):
                classes = grown_classes(was, list(c.classes))
                moved[j] = [classes.index(name) for name in c.classes]
                f: Any = self.fields[tg.array_of(j)]  # a ColumnField
                self.fields[tg.array_of(j)] = dataclasses.replace(f, vocab=tuple(classes))
        if moved:
            self.items = [
                dataclasses.replace(it, target=renamed(it.target, moved)) for it in self.items
            ]
        self.specs = array_specs(self.fields, self.cfg)
        return len(self.items)

    def plan(self) -> list[list[Item]]:
        return split_shards(self.items, [None], self.cfg.shard_size)

    def cost(self, shard: list[Item]) -> int:
        return sum(self.sizes.get(str(it.path), 0) for it in shard)

    def task_args(self, index: int, shard: list[Item], staging: Path) -> tuple[Any, ...]:
        return (index, shard, self.cfg, self.specs, staging)

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        old = self.parent.manifest.extra.get("volumes", []) if self.parent else []
        return {"volumes": old + [v for rec in records for v in rec["volumes"]]}


def renamed(
    target: tuple[int | float, ...] | None, moved: dict[int, list[int]]
) -> tuple[int | float, ...] | None:
    """A scan's target values, the class ids of the columns in `moved` as the grown ids."""
    if target is None:
        return None
    return tuple(moved[j][int(v)] if j in moved else v for j, v in enumerate(target))


def volumes(cfg: VolumeConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    return run(VolumesKind(cfg), show_progress, profile)
