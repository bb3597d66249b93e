"""The hash comparison of docs/looking.md, "Near-duplicates and leakage": pHash (as stored), a
plain pHash (frequencies 1..8, no window) and dHash of the same decoded pixels, on the bench
photos, each given each edit of bench_dupes.EDITS in turn (and all five at once): the share of
copies within 4, 6 and 8 bits of their photo, and how many pairs of different photos come within
4-10 bits.

    python bench/bench_dupes_table.py [--count 400]      # after bench.py made bench/out/nCOUNT
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable

import numpy as np
from bench_dupes import DHASH_SHAPE, EDITS, dhash, edit
from rows import HERE

from prep.media.image.decode import decode_image
from prep.media.image.groups import pack_bits, phash, thumbnail

# the DCT-II rows of frequencies 1..8 over 32 samples, unnormalised (as prep.media.image.groups)
PLAIN = np.cos(np.pi * np.arange(1, 9)[:, None] * (2 * np.arange(32) + 1) / 64).astype(np.float32)


def plain(gray: np.ndarray) -> np.ndarray:
    """pHash without the window, of frequencies 1..8 (the DC row and column left out)."""
    c = (PLAIN @ gray.astype(np.float32) @ PLAIN.T).reshape(len(gray), 64)
    return pack_bits(c > np.median(c, axis=1, keepdims=True))


HASHES: dict[str, Callable[[list[np.ndarray]], np.ndarray]] = {
    "pHash, Hann window (stored)": lambda ims: phash(np.stack([thumbnail(i) for i in ims])),
    "pHash, frequencies 1..8, no window": lambda ims: plain(np.stack([thumbnail(i) for i in ims])),
    "dHash": lambda ims: dhash(np.stack([thumbnail(i, DHASH_SHAPE) for i in ims])),
}


def main() -> None:
    from PIL import Image, ImageOps

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=400)
    paths = sorted((HERE / "out" / f"n{ap.parse_args().count}" / "raw" / "images").rglob("*.jpg"))
    own = {k: f([decode_image(p, (256,))[0] for p in paths]) for k, f in HASHES.items()}
    for name, h in own.items():
        apart = np.bitwise_count(h[:, None] ^ h[None, :])[np.triu_indices(len(h), 1)]
        within = [int((apart <= d).sum()) for d in (4, 6, 8, 10)]
        print(f"{name}: pairs of {len(paths)} photos within 4/6/8/10 bits: {within}")
    upright = []
    for p in paths:
        with Image.open(p) as im:
            upright.append(np.asarray(ImageOps.exif_transpose(im).convert("RGB")))
    for edits in [(e,) for e in EDITS] + [EDITS]:
        copies = [decode_image(io.BytesIO(edit(u, edits)), (256,))[0] for u in upright]
        for name, f in HASHES.items():
            moved = np.bitwise_count(own[name] ^ f(copies))
            share = [f"{(moved <= d).mean():.3f}" for d in (4, 6, 8)]
            print(f"{' + '.join(edits)} / {name}: within 4/6/8 bits {share}")


if __name__ == "__main__":
    main()
