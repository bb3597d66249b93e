"""WebDataset tars read with the standard library, for `prep import webdataset`: shard patterns
expanded as the shell does, each tar scanned from its headers (and its .npy headers) into samples
(members grouped by key) and rejects, and members read by offset, a tar held open a thread.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
import tarfile
import threading
import zlib
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from tokenize import TokenError
from typing import IO, Any

import numpy.lib.format as npf

from loaders.remote.storage import filesystem, url_of
from prep.run.errors import PrepError, UsageError
from prep.run.inputs import reject_record

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


def release(run: str) -> None:
    """Close the tars `run` holds open in this process."""
    for key in [k for k in _held if k[0] == run]:
        _held.pop(key)[1].close()
