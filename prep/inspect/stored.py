"""Reading an image dataset's first samples as stored, for prep preview: through the loaders'
shard store, so that every file and array is checked first (labels against classes, offsets,
sides): a bad dataset is one FormatError line, never an IndexError from a raw read."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from loaders.format import OFFSETS, FormatError, Manifest, array_name, read_manifest
from loaders.read.store import ShardStore
from prep.run.errors import PrepError


def open_images(root: Path, size: int | None, what: str) -> tuple[ShardStore, int]:
    """An image dataset's store, opened through the loaders' checks of every file and array
    (a FormatError naming the first problems), and the stored size to use (default: the
    smallest)."""
    size = image_dataset(root, size, what)[1]
    return ShardStore(root, "images"), size


def image_dataset(root: Path, size: int | None, what: str) -> tuple[Manifest, int]:
    """The manifest of an image dataset and the stored size to use (default: the smallest)."""
    m = read_manifest(root)
    if m.kind != "images":
        raise PrepError(f"{root} holds {m.kind}; {what} image datasets")
    sizes = m.sizes()
    size = min(sizes) if size is None else size
    if size not in sizes:
        raise PrepError(f"{root} has no size {size}. HINT: --size one of {sizes}")
    return m, size


def first_samples(store: ShardStore, name: str, count: int, size: int | None) -> list[np.ndarray]:
    """The first `count` samples of array `name` as stored, across shards: raw ones as they
    are, ragged ones at their own (h, w) (hw_SIZE), JPEG ones decoded after their checksum."""
    m, out = store.manifest, list[np.ndarray]()
    spec = m.arrays[name]
    for s, shard in enumerate(m.shards):
        n = min(shard.count, count - len(out))
        if n <= 0:
            break
        data = store.array(s, name)
        if not spec.ragged:
            out += list(data[:n])
            continue
        off = store.array(s, name + OFFSETS)
        hw_name = array_name("hw", size)
        hw = store.array(s, hw_name) if hw_name in m.arrays else np.full((n, 2), size or 0)
        crc = store.array(s, array_name("crc", size)) if spec.codec == "jpeg" else None
        for k in range(n):
            raw, sides = data[off[k] : off[k + 1]], (int(hw[k][0]), int(hw[k][1]))
            if spec.field == "source":
                out.append(raw)
            elif crc is None:
                out.append(raw.reshape(*sides, *spec.shape[2:]))
            else:
                out.append(_jpeg(store, s, k, raw, sides, spec.shape[-1], int(crc[k])))
    return out


def _jpeg(
    store: ShardStore, s: int, k: int, raw: np.ndarray, hw: tuple[int, int], channels: int, crc: int
) -> np.ndarray:
    """Sample k of shard s, decoded at its stored (h, w); its checksum first."""
    from loaders.read.decode import decode_jpeg

    where = f"{store.root} (shard {s}, sample {k})"
    if zlib.crc32(raw.data) != crc:
        raise FormatError(f"{where}: the JPEG bytes differ from their checksum. HINT: repack")
    try:
        return decode_jpeg(raw, hw, 1, channels).copy()
    except (ValueError, OSError) as e:
        raise FormatError(f"{where}: the JPEG sample cannot be decoded ({e}). HINT: repack") from e
