"""prep audio: sound files decoded once (prep.media.audio), resampled to one rate, on the samples
run: `audio` (ragged), `source`, `source_rate` (Hz), `start` (in samples at --rate: --max-seconds
cuts a file into clips), `label` with labels, and a field per --targets column.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from loaders.fields import Audio, Field, Label, Scalar
from loaders.fields.base import check_name
from prep.kinds.audio.config import AudioConfig
from prep.media.audio import QUALITY, decode_clip
from prep.run.classmaps import named_targets
from prep.run.driver import run
from prep.run.errors import PrepError
from prep.run.grow import file_identity
from prep.run.kind import Inputs, fingerprint
from prep.run.samples import Sample, SamplesRun
from prep.run.summary import RunSummary
from prep.sources.audio import Clip, Listing, list_audio

FIXED = ("audio", "source", "source_rate", "start", "label")  # the field names targets may not take


def clip_samples(
    clip: Clip, cfg: AudioConfig, labelled: bool, targets: tuple[str, ...]
) -> list[Sample]:
    """One file -> its clips' values, cut at --max-seconds."""
    samples, source_rate = decode_clip(
        clip.path, cfg.rate, cfg.stored_channels, cfg.mono, cfg.dtype, cfg.max_file_seconds
    )
    step = cfg.segment or len(samples)
    values: dict[str, Any] = {"source_rate": source_rate}
    values |= {"label": clip.label} if labelled else {}
    values |= dict(zip(targets, clip.target, strict=True))
    return [
        {"audio": samples[start : start + step], "start": start, **values}
        for start in range(0, len(samples), step)
    ]


class AudioKind(SamplesRun):
    name = "audio"
    unit = "file"
    noun = "files"
    sourced = True
    threads = True  # libsndfile, FFmpeg and soxr run in C without the GIL
    appendable = True
    grows_classes = True
    cfg: AudioConfig

    def list_inputs(self) -> Inputs:
        cfg = self.cfg
        labels, targets = (Path(p) if p else None for p in (cfg.labels, cfg.targets))
        self.listing: Listing = list_audio(Path(str(cfg.src)), labels, targets, cfg.limit)
        if not self.listing.clips:
            n = len(self.listing.rejects)
            raise PrepError(f"no sound files in {cfg.src} ({n} rejected)")
        labelled = any(c.label is not None for c in self.listing.clips)
        self.items = self.listing.clips
        table, classes = self.listing.targets, self.listing.classes
        channels, soxr = cfg.stored_channels, f"soxr {QUALITY}"
        fields: dict[str, Field] = {
            "audio": Audio(cfg.dtype, channels, cfg.rate, cfg.mono, cfg.max_seconds, soxr),
            "source_rate": Scalar("uint32"),
            "start": Scalar("int64"),
        }
        if labelled:
            fields["label"] = Label(tuple(classes) if classes else None)
        for col in table.columns if table is not None else []:
            problem = check_name(col.name) or (col.name in FIXED and f"{col.name!r} is taken")
            if problem:
                raise PrepError(
                    f"--targets {table.path}: column {col.name!r} cannot name a field ({problem}). "  # type: ignore[union-attr]
                    "HINT: rename the column to a Python identifier"
                )
            fields[col.name] = Label(tuple(col.classes)) if col.classes else Scalar(col.dtype)
        self.declare(fields)
        columns = tuple(n for n in fields if n not in FIXED)
        self.make = functools.partial(clip_samples, cfg=cfg, labelled=labelled, targets=columns)
        self.sizes = {c.rel: _size(c.path) for c in self.listing.clips}
        read = [(c.rel, *self.sizes[c.rel]) for c in self.listing.clips]
        read += [(str(p), *_size(p)) for p in (labels, targets) if p is not None]
        digest = fingerprint([read, self.described()])
        return Inputs(len(self.listing.clips), self.listing.rejects, digest)

    def sources(self) -> list[Path]:
        return [Path(p) for p in (self.cfg.src, self.cfg.labels, self.cfg.targets) if p]

    def identities(self) -> dict[str, str]:
        """A file's size and time, its class's name and its targets."""
        names, table = self.listing.classes, self.listing.targets
        columns = table.columns if table is not None else []
        return {
            c.rel: file_identity(c.path, c.label, names, named_targets(columns, c.target))
            for c in self.items
        }

    def cost(self, shard: list[Clip]) -> int:
        return sum(self.sizes[c.rel][0] for c in shard)


def _size(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except (OSError, ValueError):  # gone, or a bad name: decoding rejects it
        return -1, -1
    return st.st_size, st.st_mtime_ns


def audio(cfg: AudioConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    return run(AudioKind(cfg), show_progress, profile)
