"""`prep import webdataset 'shards/train-{000000..000099}.tar' OUT`: WebDataset tars as samples:
members grouped by key (the path up to the file name's first dot), a field an extension (KINDS;
the image extensions a sample has one of are the field `image`), `__key__` the key. Listing reads
tar (and .npy) headers only; workers read members by offset (both in prep.kinds.importers.tars).
"""

from __future__ import annotations

import io
import json
import math
import posixpath
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Array, Bytes, Field, Json, Label, Text
from loaders.remote.storage import url_of
from prep.kinds.importers.config import WdsConfig, image_field
from prep.kinds.importers.hffeatures import NUMERIC, field_name
from prep.kinds.importers.source import SourceKind
from prep.kinds.importers.tars import (
    NPY_ERRORS,
    Member,
    Scan,
    expand,
    npy_header,
    read_member,
    release,
    scan,
)
from prep.run.config import listed
from prep.run.driver import run
from prep.run.errors import PrepError, Reject, UsageError
from prep.run.grow import adopt_early
from prep.run.samples import Item
from prep.run.summary import RunSummary
from prep.sources.samples import Source, file_stats

IMAGES = ("jpg", "jpeg", "png", "webp")
# The field kind of an extension (its last part: "seg.png" is a png); any other is Bytes.
KINDS = dict.fromkeys(IMAGES, "image") | dict(cls="label", txt="text", json="json", npy="array")


@dataclass(frozen=True)
class Declared:
    """A field of the import: the extension of its members (`jpg;png`: either) and its kind."""

    name: str
    ext: str
    kind: str


@dataclass(frozen=True)
class WdsSamples:
    """make() of the import: (tar, key, members) -> the sample's values by field name."""

    tars: tuple[str, ...]
    declared: tuple[Declared, ...]
    run: str = field(default_factory=lambda: uuid.uuid4().hex, repr=False, compare=False)

    def __call__(self, ref: tuple[int, str, tuple[Member, ...]]) -> dict[str, Any]:
        tar, key, members = ref
        where = {ext: (offset, size) for ext, offset, size in members}
        out: dict[str, Any] = {"__key__": key}
        for d in self.declared:  # `jpg;png`: the first of them the sample has
            ext = next((e for e in d.ext.split(";") if e in where), None)
            if ext is not None:
                data = read_member(self.run, self.tars[tar], *where[ext])
                out[d.name] = value_of(d, data)
        return out


def value_of(d: Declared, data: bytes) -> Any:
    """A member's bytes as its field takes them (images, text and bytes as they are)."""
    if d.kind == "label":
        try:
            return int(data.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            raise Reject(f"field {d.name}: {data[:20]!r} is not a class id", "bad_label") from None
    if d.kind == "json":
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as e:  # not JSON, a huge integer, deep nesting
            raise Reject(f"field {d.name}: not JSON ({e})", "field_json") from None
    if d.kind == "array":
        head = io.BytesIO(data)
        try:
            dtype, shape = npy_header(head)
            if math.prod(shape) * dtype.itemsize > len(data) - head.tell():  # before numpy
                raise ValueError(f"its header claims {shape} of {dtype}, more than it holds")
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except (*NPY_ERRORS, OSError, EOFError) as e:
            raise Reject(f"field {d.name}: not an .npy array ({e})", "field_type") from None
        return arr.astype(arr.dtype.newbyteorder("="), copy=False)
    return data


def list_shards(cfg: WdsConfig) -> tuple[Source, WdsSamples, dict[str, Field]]:
    """The samples of cfg.src's tars as inputs, the function that reads one, and the fields."""
    src = str(cfg.src)  # a folder of .tar files, or a pattern
    if url_of(src) is None and Path(src).is_dir():
        paths = sorted(str(p) for p in Path(src).iterdir() if ".tar" in p.name)
    else:
        paths = expand(url_of(src) or src)
    cap = int(cfg.max_member_mb * 1e6)
    with ThreadPoolExecutor(8) as pool:  # headers: reads that wait on the disk or network
        scans = list(pool.map(lambda p: scan(p, cap), paths))
    if not any(s.samples for s in scans):
        first = next((f"{r['path']}: {r['message']}" for s in scans for r in s.rejects), "")
        raise PrepError(f"{cfg.src}: no sample to import ({first}). HINT: check the pattern")
    seen = Counter(ext for s in scans for _, members in s.samples for ext, _, _ in members)
    declared = _declared(cfg, scans, seen)
    used = {e for d in declared for e in d.ext.split(";")}
    image = image_field(cfg)
    fields = {"__key__": Text()} | {d.name: _field(d, scans, image) for d in declared}
    items = [  # each sample's source: its tar's name and its key
        Item(f"{path}:{key}", (t, key, members), source=f"{posixpath.basename(path)}:{key}")
        for t, (path, s) in enumerate(zip(paths, scans, strict=True))
        for key, members in s.samples
    ]
    local = [Path(p) for p, s in zip(paths, scans, strict=True) if "://" not in p and s.samples]
    ignored = {e: n for e, n in seen.items() if e not in used}
    said = {"shards": paths, "fields": {d.name: d.ext for d in declared}, "ignored": ignored}
    extra = {"webdataset": said}
    rejects = [r for s in scans for r in s.rejects]
    source = Source(items, {None: len(items)}, rejects, [*file_stats(local), *paths], extra)
    return source, WdsSamples(tuple(paths), declared), fields


def _declared(cfg: WdsConfig, scans: list[Scan], seen: dict[str, int]) -> tuple[Declared, ...]:
    """--fields (`jpg;png`: whichever a sample has) or every extension seen, the image
    extensions that no sample has two of as one field."""
    if cfg.fields:
        exts = listed(cfg.fields, "--fields", str)
    else:
        exts = sorted(seen)
        images = [e for e in exts if e in IMAGES]
        apart = not any(
            sum(ext in images for ext, _, _ in members) > 1
            for s in scans
            for _, members in s.samples
        )
        if len(images) > 1 and apart:
            exts = [";".join(images), *(e for e in exts if e not in images)]
    unknown = [a for e in exts for a in e.split(";") if a not in seen]
    if unknown or not exts:
        raise _usage(cfg.src, f"no member has extension {unknown[0]!r}" if unknown else "")
    total = sum(len(s.samples) for s in scans)
    for e in [] if cfg.fields else exts:  # so many samples lack it, their rejects fail the run
        have = min(total, sum(seen.get(a, 0) for a in e.split(";")))
        if total - have > cfg.max_rejects * total:
            rest = ",".join(x for x in exts if x != e) or "..."
            raise UsageError(
                f"{cfg.src}: extension {e!r} is in {have} of {total} samples, and a sample "
                "without a field is a field_missing reject (more than --max-rejects "
                f"{cfg.max_rejects:g}). HINT: --fields '{rest}' leaves it out; --fields "
                f"'{','.join(exts)}' with a higher --max-rejects keeps only the samples that "
                "have it"
            )
    # The one field of image extensions is `image`, whichever the tars hold: the loader's code
    # does not change with the dataset. Two keep their extensions' names.
    pictures = [e for e in exts if all(a in IMAGES for a in e.split(";"))]
    declared = []
    for e in exts:
        kinds = {KINDS.get(a.rsplit(".", 1)[-1].lower(), "bytes") for a in e.split(";")}
        kind = kinds.pop() if len(kinds) == 1 else "bytes"
        name = "image" if pictures == [e] else field_name(e.split(";")[0])
        declared.append(Declared(name, e, kind))
    names = [d.name for d in declared]
    if len(set(names)) < len(names):
        raise _usage(cfg.src, f"--fields {cfg.fields} names field {names[0]!r} twice")
    return tuple(declared)


def _usage(src: object, what: str) -> UsageError:
    return UsageError(f"{src}: {what}. HINT: check the shard pattern and --fields")


def _field(d: Declared, scans: list[Scan], image: Field) -> Field:
    """Declared field `d` as a field of prep.fields; an array: the first sample's .npy dtype
    and shape, ragged first if the samples' shapes differ."""
    if d.kind == "image":
        return image
    if d.kind != "array":
        return {"label": Label, "text": Text, "json": Json}.get(d.kind, Bytes)()
    headers = [h for s in scans for (_, ext), h in s.npy.items() if ext == d.ext]
    if not headers:
        raise _usage(f"field {d.name}", "no .npy member that numpy reads")
    dtype, shape = headers[0]
    if dtype not in NUMERIC:
        raise _usage(f"field {d.name}", f"the first .npy holds {dtype}, not numbers")
    if all(s == shape for _, s in headers) or not shape:
        return Array(dtype, shape)
    return Array(dtype, (None, *shape[1:]))


def import_webdataset(
    cfg: WdsConfig, show_progress: bool = True, profile: bool = False
) -> RunSummary:
    cfg.validate()
    adopt_early(cfg)  # the fields follow the options
    source, samples, fields = list_shards(cfg)
    kind = SourceKind(cfg, samples, fields, source)
    try:
        return run(kind, show_progress, profile)
    finally:  # the tars this run holds open in this process
        release(samples.run)
