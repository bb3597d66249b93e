"""Looking at packed datasets: info and verify (preview and tune have modules of their own)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from loaders.format import FormatError, Manifest, check_files, read_manifest, safe_path, sha256_file
from loaders.format.legacy.arrays import FIELDS
from loaders.remote import open_remote
from prep.run.errors import PrepError


def mb(n: float) -> str:
    """Bytes as MB for people: 16,777,216 -> '16.8 MB'."""
    return f"{n / 1e6:,.1f} MB"


def info(root: Path, batch_size: int = 256) -> str:
    """A human summary: counts, fields, shapes, dtypes, bytes on disk per size, and the RAM one
    batch of `batch_size` needs at each size (size x size x channels x batch), in the dtype the
    loader returns (loaders.format.kinds: labels widen to int64)."""
    remote = open_remote(root)  # an fsspec URL: loaders.remote
    m = remote[1] if remote else read_manifest(root)
    where = remote[0].root if remote else root
    images = m.kind == "images"
    nouns = {"images": "samples", "volumes": "volumes", "table": "rows", "tokens": "documents"}
    nouns["samples"] = "samples"
    items = nouns[m.kind]
    lines = [
        f"{where}: {m.kind}, {m.num_samples:,} {items} in {len(m.shards)} {m.storage} shards, "
        f"{m.rejects} rejected, format v{m.format_version}, written by prep {m.tool_version}",
    ]
    if m.classes:
        shown = ", ".join(m.classes[:10]) + (" ..." if len(m.classes) > 10 else "")
        lines.append(f"classes ({len(m.classes)}): {shown}")
    tok = m.extra.get("tokenizer")
    if not images and isinstance(tok, dict):
        lines.append(
            f"tokenizer {tok.get('name')} ({tok.get('file')}): vocabulary "
            f"{m.extra.get('vocab_size')}, end-of-document id {m.extra.get('eot_id')}"
        )
        for split, n in sorted(m.extra.get("splits", {}).items()):
            lines.append(
                f"{split}: {n.get('tokens', 0):,} tokens in {n.get('docs', 0):,} "
                f"documents, {n.get('shards', 0)} shards"
            )
    lines += split_lines(m) if m.kind in ("images", "samples") else []
    lines += _described(m)
    for name, d in m.extra.get("fields", {}).items() if m.kind == "samples" else ():
        said = ", ".join(f"{k}={v}" for k, v in d.items() if k != "kind")
        lines.append(f"field {name}: {d['kind']}({said})")
    batch_col = f"{'batch of ' + str(batch_size):>16}" if images else ""
    lines.append(
        f"{'array':<16}{'dtype':<8}{'per item':<18}{'codec':<8}{'on disk':>12}"
        f"{'bytes/item':>12}{'of raw':>8}{batch_col}"
    )
    for name, spec in sorted(m.arrays.items()):
        elems = int(np.prod(spec.shape, dtype=np.int64))
        per = elems * np.dtype(spec.dtype).itemsize  # raw, fixed shape: the largest (mode keep)
        on_disk = _bytes_on_disk(m, name)
        items_n = m.num_samples if spec.ragged else sum(s.arrays[name].length for s in m.shards)
        each = on_disk / items_n if items_n else 0.0
        kind = FIELDS[spec.kind or spec.field]
        # against one raw item: not for a ragged array, whose items are runs of rows of `shape`
        raw = per and kind.codecs[1:] and spec.codec != "ragged"
        ratio = f"{each / per:>8.3f}" if raw else f"{'':>8}"
        out = elems * np.dtype(kind.out_dtype or spec.dtype).itemsize
        batch = f"{mb(out * batch_size):>16}" if images else ""
        lines.append(
            f"{name:<16}{spec.dtype:<8}{spec.shape!s:<18}{spec.codec:<8}{mb(on_disk):>12}"
            f"{each:>12,.0f}{ratio}{batch}"
        )
    total = sum(f.bytes for s in m.shards for f in s.files.values())
    lines.append(f"total on disk: {mb(total)}")
    return "\n".join(lines)


def split_lines(m: Manifest) -> list[str]:
    """Each split's sample count (from its shards) and the classes it has images of (from
    `extra.splits`, written by prep pack --splits or --val-fraction): none without splits."""
    counts: dict[str, int] = {}
    for s in m.shards:
        if s.split is not None:
            counts[s.split] = counts.get(s.split, 0) + s.count
    said = m.extra.get("splits")
    said = said if isinstance(said, dict) else {}
    lines = []
    for split, n in counts.items():
        line = f"split {split}: {n:,} samples"
        one = said.get(split)
        per = one.get("per_class") if isinstance(one, dict) else None
        if m.classes and isinstance(per, list) and len(per) == len(m.classes):
            have = [c for c, k in zip(m.classes, per, strict=True) if k]
            line += f", {len(have)} of {len(m.classes)} classes"
            lacking = [c for c in m.classes if c not in have]
            if lacking:
                line += f" (none of: {', '.join(lacking[:5])}{' ...' if len(lacking) > 5 else ''})"
        lines.append(line)
    return lines


def _described(m: Manifest) -> list[str]:
    """A kind's own lines: a table's columns, each volume's shape and spacing."""
    if m.kind == "table":
        from prep.inspect.show_table import describe

        return describe(m)
    if m.kind == "volumes":
        from prep.inspect.show_volumes import describe_volumes

        return describe_volumes(m)
    if m.kind == "samples" and "audio" in m.extra:
        from prep.inspect.show_audio import describe_audio

        return describe_audio(m)
    if m.kind == "samples" and "video" in m.extra:
        from prep.inspect.show_video import describe_video

        return describe_video(m)
    return []


def _bytes_on_disk(m: Manifest, name: str) -> int:
    """Bytes of array `name` in every shard: its data (and a ragged array's int64 offsets)."""
    spec = m.arrays[name]
    itemsize = np.dtype(spec.dtype).itemsize
    total = 0
    for shard in m.shards:
        ref = shard.arrays.get(name)
        if ref is None:
            continue
        if ref.offsets is None:
            total += ref.length * itemsize * int(np.prod(spec.shape, dtype=np.int64))
        else:
            total += ref.length * itemsize + 8 * ref.offsets.length
    return total


def verify(root: Path, limit: int | None = None) -> tuple[Manifest, list[str]]:
    """Recompute every checksum and check every shape: the problems, one line each.

    `limit`: only the shards holding the first `limit` samples; the manifest returned lists
    just those shards."""
    remote = open_remote(root)  # an fsspec URL: loaders.remote
    m = remote[1] if remote else read_manifest(root)
    if limit is not None:
        if limit < 1:
            raise PrepError("--limit must be at least 1")
        ends = np.cumsum([s.count for s in m.shards])
        keep = int(np.searchsorted(ends, limit)) + 1  # shards up to the one holding `limit`
        m = dataclasses.replace(m, shards=m.shards[:keep])
    if remote:
        return m, remote[0].problems(m, checksums=True)
    problems = check_files(root, m, checksums=True)
    tok = m.extra.get("tokenizer")
    if isinstance(tok, dict) and tok.get("file"):  # token datasets carry their tokenizer
        try:
            path = safe_path(root, str(tok["file"]))
            if not path.is_file():
                problems.append(f"tokenizer: {path} is missing")
            elif sha256_file(path) != tok.get("sha256"):
                problems.append(f"tokenizer: {path} checksum differs from the manifest")
        except FormatError as e:
            problems.append(f"tokenizer: {e}")
    return m, problems
