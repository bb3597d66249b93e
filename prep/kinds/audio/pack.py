"""prep audio: sound files decoded once (prep.media.audio), resampled to one rate and
packed as a samples dataset on the one shard writer (prep.run.shardwriter.write_shard).

The fields (loaders.fields): `audio`, the clip's samples, ragged (frames,) int16 (or
float16), or (frames, C) without --mono; `source`, the file's path under SRC; `source_rate`
(Hz); `start`, where the clip starts in its file in samples at --rate (--max-seconds cuts a
file into several clips); `label` with labels; one field per --targets column. `extra.audio`
gives the rate, channels and totals that loaders.AudioDataset reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Array, Field, Label, Scalar, Text
from loaders.fields.base import FieldError, check_name
from loaders.format import ArraySpec, Manifest, Shard
from loaders.format.schema import SAMPLES_VERSION
from prep.fields.image import arrays_of
from prep.kinds.audio.config import AudioConfig
from prep.media.audio import QUALITY, Limit, decode_clip
from prep.run.driver import Inputs, Kind, RunSummary, run, shard_size
from prep.run.errors import PrepError
from prep.run.inputs import Reject
from prep.run.shardwriter import write_shard
from prep.run.tasks import shard_task
from prep.sources.audio import Clip, Listing, list_audio
from prep.sources.targets import Targets

FIXED = ("audio", "source", "source_rate", "start", "label")  # the field names targets may not take


def audio_fields(
    cfg: AudioConfig, classes: list[str] | None, labelled: bool, targets: Targets | None
) -> dict[str, Field]:
    """The dataset's fields, in manifest order."""
    row = () if cfg.mono else (cfg.stored_channels,)
    fields: dict[str, Field] = {
        "audio": Array(cfg.dtype, (None, *row)),
        "source": Text(),
        "source_rate": Scalar("uint32"),
        "start": Scalar("int64"),
    }
    if labelled:
        fields["label"] = Label(tuple(classes) if classes else None)
    for col in targets.columns if targets is not None else []:
        problem = check_name(col.name) or (col.name in FIXED and f"{col.name!r} is taken")
        if problem:
            raise PrepError(
                f"--targets {targets.path}: column {col.name!r} cannot name a field ({problem}). "  # type: ignore[union-attr]
                "HINT: rename the column to a Python identifier"
            )
        fields[col.name] = Label(tuple(col.classes)) if col.classes else Scalar(col.dtype)
    return fields


def encode_clip(
    clip: Clip, cfg: AudioConfig, fields: dict[str, Field]
) -> list[dict[str, np.ndarray]]:
    """One file -> its clips' samples (array name -> value), cut at --max-seconds."""
    samples, source_rate = decode_clip(
        clip.path, cfg.rate, cfg.stored_channels, cfg.mono, cfg.dtype, Limit(cfg.max_file_seconds)
    )
    step = cfg.segment or len(samples)
    values: dict[str, Any] = {"source": clip.rel, "source_rate": source_rate, "label": clip.label}
    names = [n for n in fields if n not in FIXED]
    values |= dict(zip(names, clip.target, strict=True))
    out = []
    for start in range(0, len(samples), step):
        values |= {"audio": samples[start : start + step], "start": start}
        sample: dict[str, np.ndarray] = {}
        for name, field in fields.items():
            try:
                got = field.encode(values[name])
            except FieldError as e:
                raise Reject(e.code, f"{name}: {e}") from None
            sample |= {name + suffix: arr for suffix, arr in got.items()}
        out.append(sample)
    return out


@shard_task
def audio_shard(
    index: int,
    clips: list[Clip],
    cfg: AudioConfig,
    fields: dict[str, Field],
    specs: dict[str, ArraySpec],
    staging: Path,
) -> dict[str, Any]:
    """The joblib task: the files `clips` into shard `index` under `staging`; its record."""
    encode = functools.partial(encode_clip, cfg=cfg, fields=fields)
    return write_shard(index, clips, encode, lambda c: c.rel, specs, cfg.format, staging)


class AudioKind(Kind[AudioConfig, list[Clip]]):
    name = "samples"
    unit = "file"
    noun = "files"
    task = staticmethod(audio_shard)
    threads = True  # libsndfile, FFmpeg and soxr run in C without the GIL

    def list_inputs(self) -> Inputs:
        cfg = self.cfg
        labels, targets = (Path(p) if p else None for p in (cfg.labels, cfg.targets))
        self.listing: Listing = list_audio(Path(str(cfg.src)), labels, targets, cfg.limit)
        if not self.listing.clips:
            n = len(self.listing.rejects)
            raise PrepError(f"no sound files in {cfg.src} ({n} rejected)")
        labelled = any(c.label is not None for c in self.listing.clips)
        self.fields = audio_fields(cfg, self.listing.classes, labelled, self.listing.targets)
        self.specs = {
            n: s for name, f in self.fields.items() for n, s in arrays_of(name, f).items()
        }
        self.sizes = {c.rel: _size(c.path) for c in self.listing.clips}
        read = [(c.rel, *self.sizes[c.rel]) for c in self.listing.clips]
        read += [(str(p), *_size(p)) for p in (labels, targets) if p is not None]
        said = json.dumps([read, self.described()], default=str)
        digest = hashlib.sha256(said.encode()).hexdigest()
        return Inputs(len(self.listing.clips), self.listing.rejects, digest)

    def sources(self) -> list[Path]:
        return [Path(p) for p in (self.cfg.src, self.cfg.labels, self.cfg.targets) if p]

    def plan(self) -> list[list[Clip]]:
        clips = self.listing.clips
        size = shard_size(len(clips), self.cfg.shard_size)
        return [clips[i : i + size] for i in range(0, len(clips), size)]

    def cost(self, shard: list[Clip]) -> int:
        return sum(self.sizes[c.rel][0] for c in shard)

    def task_args(self, index: int, shard: list[Clip], staging: Path) -> tuple[Any, ...]:
        return (index, shard, self.cfg, self.fields, self.specs, staging)

    def described(self) -> dict[str, Any]:
        return {name: f.describe() for name, f in self.fields.items()}

    def manifest(self, records: list[dict[str, Any]]) -> Manifest:
        shards = [Shard.from_dict(rec["shard"]) for rec in records]
        cfg, frames = self.cfg, sum(s.arrays["audio"].length for s in shards)
        audio = {
            "rate": cfg.rate,
            "channels": cfg.stored_channels,
            "dtype": cfg.dtype,
            "max_seconds": cfg.max_seconds,
            "resampler": f"soxr {QUALITY}",
            "seconds": frames / cfg.stored_channels / cfg.rate,
        }
        return Manifest(
            kind="samples",
            storage=cfg.format,
            arrays=self.specs,
            shards=shards,
            extra={"fields": self.described(), "audio": audio},
            format_version=SAMPLES_VERSION,
        )


def _size(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except (OSError, ValueError):  # gone, or a bad name: decoding rejects it
        return -1, -1
    return st.st_size, st.st_mtime_ns


def audio(cfg: AudioConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    """`prep audio SRC OUT`: write the dataset; its summary."""
    return run(AudioKind(cfg), show_progress, profile)
