"""Looking at packed datasets: info and verify (preview and tune: prep.preview, prep.tune)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from loaders.format import Manifest, check_files, read_manifest
from prep import PrepError


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def info(root: Path, batch_size: int = 256) -> str:
    """A human summary: counts, fields, shapes, dtypes, bytes on disk per size, and the RAM one
    batch of `batch_size` needs at each size (size x size x channels x batch)."""
    m = read_manifest(root)
    lines = [
        f"{root}: {m.kind}, {m.num_samples:,} samples in {len(m.shards)} {m.storage} shards, "
        f"{m.rejects} rejected, format v{m.format_version}, written by prep {m.tool_version}",
    ]
    if m.classes:
        shown = ", ".join(m.classes[:10]) + (" ..." if len(m.classes) > 10 else "")
        lines.append(f"classes ({len(m.classes)}): {shown}")
    lines.append(
        f"{'array':<16}{'dtype':<8}{'per sample':<18}{'on disk':>12}"
        f"{'batch of ' + str(batch_size):>16}"
    )
    for name, spec in sorted(m.arrays.items()):
        per = int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize
        on_disk = per * sum(s.arrays[name].length for s in m.shards if name in s.arrays)
        lines.append(
            f"{name:<16}{spec.dtype:<8}{spec.shape!s:<18}{_mb(on_disk):>12}"
            f"{_mb(per * batch_size):>16}"
        )
    total = sum(f.bytes for s in m.shards for f in s.files.values())
    lines.append(f"total on disk: {_mb(total)}")
    return "\n".join(lines)


def verify(root: Path, limit: int | None = None) -> tuple[Manifest, list[str]]:
    """Recompute every checksum and check every shape: the problems, one line each.

    `limit`: only the shards holding the first `limit` samples; the manifest returned lists
    just those shards."""
    m = read_manifest(root)
    if limit is not None:
        if limit < 1:
            raise PrepError("--limit must be at least 1")
        ends = np.cumsum([s.count for s in m.shards])
        keep = int(np.searchsorted(ends, limit)) + 1  # shards up to the one holding `limit`
        m = dataclasses.replace(m, shards=m.shards[:keep])
    return m, check_files(root, m, checksums=True)
