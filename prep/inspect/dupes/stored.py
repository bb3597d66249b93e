"""Reading a packed dataset's hashes, or computing them from its stored pixels (older datasets,
`prep report --hash`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loaders.fields.base import decode_source
from loaders.format import OFFSETS, FormatError, Shard, array_name, read_manifest
from loaders.read.store import ShardStore
from prep.media.image.hashing import DIGEST_BYTES, phash, pixel_digest, thumbnail
from prep.run.errors import PrepError

CHUNK = 256  # images hashed at a time when computing from stored pixels


@dataclass
class Hashes:
    """One dataset's hashes, in sample order."""

    phash: np.ndarray  # (N,) uint64 perceptual hash (prep.media.image.hashing.phash)
    digest: np.ndarray  # (N, 32) uint8 sha256 of the stored pixels (hashing.pixel_digest)
    paths: list[str]  # each sample's source path, relative, as stored ("#i" when none is)

    def __len__(self) -> int:
        return len(self.phash)


def _split_shards(root: Path, shards: list[Shard], split: str | None) -> list[int]:
    """The indices of the shards of `split` (None: all); PrepError naming the splits there are
    when it has none."""
    chosen = [i for i, s in enumerate(shards) if split in (None, s.split)]
    if split is not None and not chosen:
        have = sorted({str(s.split) for s in shards if s.split is not None})
        raise PrepError(
            f"{root} has no split {split!r}. HINT: pass one of its splits "
            f"({', '.join(have) or 'none: it was packed without --splits or --val-fraction'})"
        )
    return chosen


def dataset_hashes(root: str | Path, compute: bool = False, split: str | None = None) -> Hashes:
    """The hashes `prep pack` stored in the dataset at `root` (of its split `split` only, in
    that split's sample order, as `ImageShardDataset(root, split=split)` indexes it). A
    dataset packed without them: computed from its stored pixels when `compute` (the pHash
    from the largest size: close to, not equal to, what pack stores; the digest from the
    smallest, as pack makes it), else PrepError."""
    root = Path(root)
    try:
        m = read_manifest(root)
    except FileNotFoundError as e:
        raise PrepError(f"{root} is not a packed dataset. HINT: pass the OUT of prep pack") from e
    stored = "phash" in m.arrays and "digest" in m.arrays
    if not stored and m.kind != "images":  # before the --hash hint: it would not help
        raise PrepError(
            f"{root} holds {m.kind}: only image datasets have perceptual hashes. "
            "HINT: pass the OUT of prep pack"
        )
    if not stored and not compute:
        raise PrepError(
            f"{root} was packed without per-sample hashes (phash, digest). "
            f"HINT: run prep report {root} --hash (or prep dupes {root} --hash) to compute "
            "them from the stored pixels, "
            "or pack it again"
        )
    store = ShardStore(root, m.kind)
    shards = _split_shards(root, m.shards, split)
    paths = _paths(store, shards)
    if stored:
        ph = [np.asarray(store.array(s, "phash"), dtype=np.uint64) for s in shards]
        dg = [np.asarray(store.array(s, "digest"), dtype=np.uint8) for s in shards]
    else:
        from prep.run.parallel import progress

        big, small = max(m.sizes()), min(m.sizes())
        ph, dg = [], []
        bar = progress(sum(m.shards[s].count for s in shards), "img", "hash")  # on a terminal
        for s in shards:
            pairs = zip(_pixels(store, s, big), _pixels(store, s, small), strict=True)
            while chunk := list(itertools.islice(pairs, CHUNK)):
                got = _hash_chunk(chunk)
                ph.append(got[0])
                dg.append(got[1])
                bar.update(len(chunk))
        bar.close()
    phashes = np.concatenate(ph) if ph else np.zeros(0, np.uint64)
    digests = np.concatenate(dg) if dg else np.zeros((0, DIGEST_BYTES), np.uint8)
    return Hashes(phashes, digests.reshape(-1, DIGEST_BYTES), paths)


def _paths(store: ShardStore, shards: list[int]) -> list[str]:
    """Each sample's stored source path; "#i" (its index) for a dataset packed without."""
    counts = [store.manifest.shards[s].count for s in shards]
    if "source" not in store.manifest.arrays:
        return [f"#{i}" for i in range(sum(counts))]
    out = []
    for s, count in zip(shards, counts, strict=True):
        data, off = _ragged(store, s, "source")
        out += [decode_source(data[off[k] : off[k + 1]]) for k in range(count)]
    return out


def _ragged(store: ShardStore, shard: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    if name not in store.manifest.arrays:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    return store.array(shard, name), store.array(shard, name + OFFSETS)


def _pixels(store: ShardStore, shard: int, size: int) -> Iterator[np.ndarray]:
    """Each stored image of the shard at `size`, (H, W, C) uint8: raw, ragged or JPEG."""
    name = array_name("image", size)
    spec = store.manifest.arrays[name]
    if not spec.ragged:
        yield from store.array(shard, name)
        return
    data, off = _ragged(store, shard, name)
    hw = store.array(shard, array_name("hw", size)) if spec.codec == "ragged" else None
    for k in range(len(off) - 1):
        raw = np.asarray(data[off[k] : off[k + 1]])
        if hw is not None:
            yield raw.reshape(int(hw[k][0]), int(hw[k][1]), spec.shape[-1])
            continue
        import simplejpeg

        try:
            yield simplejpeg.decode_jpeg(raw.tobytes(), "GRAY" if spec.shape[-1] == 1 else "RGB")
        except ValueError as e:
            raise FormatError(f"shard {shard}: sample {k} of {name} is not a JPEG ({e})") from e


def _hash_chunk(images: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """pHashes of a few stored images (largest size), and their pixel digests (smallest)."""
    thumbs = np.stack([thumbnail(big[..., 0] if big.shape[-1] == 1 else big) for big, _ in images])
    return phash(thumbs), np.stack([pixel_digest(small) for _, small in images])
