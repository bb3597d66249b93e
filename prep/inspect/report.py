"""`prep info` and `prep verify`: what any packed dataset holds, and whether its files are intact,
asked of its fields (loaders.fields: each field's `lines`, `files` and checks)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np

from loaders.fields import declared
from loaders.fields.checks import check_files
from loaders.format import FormatError, Manifest, read_manifest, safe_path, sha256_file
from loaders.format.spec import problems_error
from loaders.remote import open_remote, structure_problems
from prep.run.errors import PrepError


def mb(n: float) -> str:
    """Bytes as MB for people: 16,777,216 -> '16.8 MB'."""
    return f"{n / 1e6:,.1f} MB"


def header(where: object, m: Manifest) -> str:
    """What the dataset is: its fields (and kinds), samples per split, shards, what wrote it."""
    per = Counter[str]()
    for split, n in zip(m.split_of(), m.counts().tolist(), strict=True):
        per[split or "all"] += n
    splits = f" ({', '.join(f'{s} {n:,}' for s, n in per.items())})" if m.splits else ""
    kinds = [n if d.get("kind") == n else f"{n} ({d.get('kind')})" for n, d in m.fields.items()]
    return (
        f"{where}: {', '.join(kinds)}; {m.num_samples:,} samples{splits} in {len(m.shards)} "
        f"{m.storage} shards, {m.rejects:,} rejected, written by prep {m.command or '?'} "
        f"({m.tool_version or '?'}), format v{m.format_version}"
    )


def info(root: Path, batch_size: int = 256) -> str:
    """The header, each field's Field.lines, and each array's bytes on disk and in a batch."""
    remote = open_remote(root)  # an fsspec URL: loaders.remote
    m = remote[1] if remote else read_manifest(root)
    problems = structure_problems(m, root)
    if problems:  # a shard without an array: a KeyError in the table below
        raise problems_error(problems)
    fields = declared(m)
    lines = [header(remote[0].root if remote else root, m)]
    headed: set[str] = set()
    for name, f in fields.items():
        said = f.lines(name, m)
        if said and f.heading is not None and f.heading not in headed:
            headed.add(f.heading)
            lines.append(f.heading)
        lines += said
    batch = f"batch of {batch_size}"
    lines.append(
        f"{'array':<16}{'dtype':<8}{'per item':<18}{'codec':<8}{'on disk':>12}"
        f"{'bytes/item':>12}{'of raw':>8}{batch:>16}"
    )
    for name, spec in sorted(m.arrays.items()):
        elems = int(np.prod(spec.shape, dtype=np.int64))
        per = elems * np.dtype(spec.dtype).itemsize  # raw, fixed shape: the largest (mode keep)
        refs = [s.arrays[name] for s in m.shards if name in s.arrays]
        on_disk = sum(  # a ragged array's data and its int64 offsets
            r.length * (per if r.offsets is None else np.dtype(spec.dtype).itemsize)
            + (0 if r.offsets is None else 8 * r.offsets.length)
            for r in refs
        )
        items = m.num_samples if spec.ragged else sum(s.arrays[name].length for s in m.shards)
        each = on_disk / items if items else 0.0
        # against one raw item: for pixels (a ragged array's items are runs of rows)
        ratio = f"{each / per:>8.3f}" if per and spec.size and spec.codec != "ragged" else " " * 8
        field = fields.get(spec.field)
        out = np.dtype(field.read_dtype(spec) if field else spec.dtype).itemsize * elems
        ram = mb(out * batch_size) if spec.codec in ("raw", "jpeg") else ""
        lines.append(
            f"{name:<16}{spec.dtype:<8}{spec.shape!s:<18}{spec.codec:<8}{mb(on_disk):>12}"
            f"{each:>12,.0f}{ratio}{ram:>16}"
        )
    total = sum(f.bytes for s in m.shards for f in s.files.values())
    lines.append(f"total on disk: {mb(total)}")
    return "\n".join(lines)


def verify(root: Path, limit: int | None = None) -> tuple[Manifest, list[str]]:
    """The problems (a line each) of every checksum, shape, bound and Field.files, up to `limit`."""
    remote = open_remote(root)  # an fsspec URL: loaders.remote
    m = remote[1] if remote else read_manifest(root)
    if limit is not None:
        if limit < 1:
            raise PrepError("--limit must be at least 1")
        ends = np.cumsum(m.counts())
        keep = int(np.searchsorted(ends, limit)) + 1  # shards up to the one holding `limit`
        m = dataclasses.replace(m, shards=list(m.shards[:keep]), index=None)
    if remote:
        return m, remote[0].problems(m, checksums=True)
    problems = check_files(root, m, checksums=True)
    for name, f in declared(m).items():
        for file, digest in f.files(name).items():
            try:
                path = safe_path(root, file)
                if not path.is_file():
                    problems.append(f"{name}: {path} is missing")
                elif digest is not None and sha256_file(path) != digest:  # None: not recorded
                    problems.append(f"{name}: {path} checksum differs from the manifest")
            except FormatError as e:
                problems.append(f"{name}: {e}")
    return m, problems
