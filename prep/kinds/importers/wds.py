"""`prep import webdataset 'shards/train-{000000..000099}.tar' OUT`: WebDataset tars, read with the
standard library, as samples: members grouped by key (the path up to the file name's first dot),
a field an extension (KINDS; the image extensions a sample has one of are the field `image`),
`__key__` the key. Listing reads tar (and .npy) headers only; workers read members by offset.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import math
import posixpath
import re
import tarfile
import threading
import uuid
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from tokenize import TokenError
from typing import IO, Any

import numpy as np
import numpy.lib.format as npf

from loaders.fields import Array, Bytes, Field, Json, Label, Text
from loaders.remote.storage import filesystem, url_of
from prep.kinds.importers.config import WdsConfig, image_field
from prep.kinds.importers.hffeatures import NUMERIC, field_name
from prep.kinds.importers.source import SourceKind
from prep.run.config import listed
from prep.run.driver import run
from prep.run.errors import PrepError, Reject, UsageError
from prep.run.grow import adopt_early
from prep.run.inputs import reject_record
from prep.run.samples import Item
from prep.run.summary import RunSummary
from prep.sources.samples import Source, file_stats

BRACES = re.compile(r"\{([^{}]*)\}")
# Shard names a pattern may give: more is a typo (the largest public sets have ~10^5 shards).
MAX_SHARDS = 1_000_000
Member = tuple[str, int, int]  # extension, offset of its data, size


def expand(pattern: str) -> list[str]:
    """The shard names a pattern gives, braces expanded as the shell and WebDataset do.

    >>> expand("s/train-{00..02}.tar"), expand("{a,b}-{1..2}")
    (['s/train-00.tar', 's/train-01.tar', 's/train-02.tar'], ['a-1', 'a-2', 'b-1', 'b-2'])
    """
    parts = BRACES.split(pattern)  # text, brace, text, ..., text
    names = [parts[0]]
    for body, text in zip(parts[1::2], parts[2::2], strict=True):
        span = re.fullmatch(r"(\d+)\.\.(\d+)", body)
        lo, hi = (int(span[1]), int(span[2])) if span else (0, body.count(","))
        if hi < lo:
            raise UsageError(f"{pattern}: the range {{{body}}} runs backwards")
        if len(names) * (hi - lo + 1) > MAX_SHARDS:  # counted before a name is made
            raise UsageError(
                f"{pattern}: gives {len(names) * (hi - lo + 1):,} shard names, more than "
                f"{MAX_SHARDS:,}. HINT: check its ranges"
            )
        if span:
            width = len(span[1]) if span[1].startswith("0") else 0
            choices = [f"{i:0{width}d}" for i in range(lo, hi + 1)]
        else:
            choices = body.split(",")
        names = [n + c + text for n in names for c in choices]
    return names


def open_tar(path: str) -> IO[bytes]:
    """The tar's bytes, seekable (a file or URL), decompressed by its first bytes."""
    url = url_of(path)
    raw: IO[bytes] = filesystem(url).open(url, "rb") if url else open(path, "rb")  # noqa: SIM115
    magic = raw.read(6)
    raw.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if magic.startswith(b"\xfd7zXZ"):
        return lzma.LZMAFile(raw)
    return raw


@dataclass
class Scan:
    """One tar's samples (key -> its members), in order, and its rejects."""

    samples: list[tuple[str, tuple[Member, ...]]]
    rejects: list[dict[str, Any]]
    npy: dict[tuple[str, str], tuple[str, tuple[int, ...]]]  # (key, ext) -> dtype, shape


def scan(path: str, max_member: int) -> Scan:
    """scan_tar of the tar at `path` (a reject when it cannot be opened)."""
    try:
        with open_tar(path) as f:
            return scan_tar(f, path, max_member)
    except FileNotFoundError:
        return Scan([], [reject_record(path, "missing", "no such shard")], {})
    except OSError as e:
        return Scan([], [reject_record(path, "bad_tar", f"cannot open it ({e})")], {})


def scan_tar(f: IO[bytes], path: str, max_member: int) -> Scan:
    """The samples of the tar in `f` from its headers (and .npy headers). A member over
    `max_member` bytes is a reject: workers read members whole (a gzip bomb is 1 MB)."""
    errors = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, ValueError)
    members: list[tuple[str, Member]] = []
    npy: dict[tuple[str, str], tuple[str, tuple[int, ...]]] = {}
    try:
        with tarfile.open(fileobj=f, mode="r:") as tar:
            for m in tar:  # dir/s1.seg.png: key dir/s1, extension seg.png, as WebDataset has it
                folder, _, base = m.name.rpartition("/")
                stem, _, ext = base.partition(".")
                key = f"{folder}/{stem}" if folder else stem
                if m.isfile() and stem and ext:  # not .hidden nor README
                    members.append((key, (ext, m.offset_data, m.size)))
            f.seek(tar.offset)
            whole = f.read(1024) == bytes(1024)  # the end-of-archive blocks
            for key, (ext, offset, size) in members:
                if ext.rsplit(".", 1)[-1] == "npy":
                    f.seek(offset)
                    try:
                        dtype, shape = npy_header(io.BytesIO(f.read(min(size, 65536))))
                    except NPY_ERRORS:
                        continue  # not an .npy that numpy reads: its sample is a reject when read
                    npy[key, ext] = (dtype.newbyteorder("=").name, shape)
    except errors as e:
        if not members:
            return Scan([], [reject_record(path, "bad_tar", f"not a readable tar ({e})")], {})
        whole, npy = False, {}
    samples = [(k, tuple(m for _, m in group)) for k, group in groupby(members, itemgetter(0))]
    rejects = []
    if not whole and samples:
        key, _ = samples.pop()
        why = "the tar ends early, inside or after this sample: it may have lost members"
        rejects.append(reject_record(f"{path}:{key}", "truncated_tar", why))
    kept = []
    for key, ms in samples:
        big = next((m for m in ms if m[2] > max_member), None)
        if big is None:
            kept.append((key, ms))
            continue
        why = (
            f"member {key}.{big[0]} is {big[2]:,} bytes, over --max-member-mb "
            f"{max_member / 1e6:g}: it is never read"
        )
        rejects.append(reject_record(f"{path}:{key}", "member_too_large", why))
    keys = {key for key, _ in kept}
    return Scan(kept, rejects, {k: v for k, v in npy.items() if k[0] in keys})


# What numpy's .npy header parser raises on a malformed one (TokenError: its tokenizer).
NPY_ERRORS = (ValueError, IndexError, SyntaxError, TokenError, RecursionError, OverflowError)


def npy_header(head: IO[bytes]) -> tuple[Any, tuple[int, ...]]:
    """The dtype and shape of the .npy at `head` (left after its header), or NPY_ERRORS."""
    version = npf.read_magic(head)
    read = (npf.read_array_header_1_0, npf.read_array_header_2_0)[version[0] - 1]
    shape, _, dtype = read(head)
    return dtype, tuple(shape)


# Each run's open tar a thread: a shard's samples come from few tars, read in order.
_held: dict[tuple[str, int], tuple[str, IO[bytes]]] = {}


def read_member(run: str, path: str, offset: int, size: int) -> bytes:
    """A member's bytes, read in memory from its tar."""
    key = (run, threading.get_ident())
    held = _held.get(key)
    if held is None or held[0] != path:
        if held is not None:
            held[1].close()
        _held[key] = held = (path, open_tar(path))
    held[1].seek(offset)
    data: bytes = held[1].read(size)
    if len(data) != size:
        raise PrepError(f"{path}: a member ends early ({len(data)} of {size} bytes)")
    return data


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
        for key in [k for k in _held if k[0] == samples.run]:
            _held.pop(key)[1].close()
