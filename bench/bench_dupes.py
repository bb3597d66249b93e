"""Rows 28: perceptual hashes at pack time and the near-duplicate search (issue 28).

- 28a: `prep pack` with its hashes (pHash, sha256) against `--no-hashes`, same photos.
- 28b-f: a planted set: the bench photos, 10% of them given one near-duplicate each (one of
  EDITS each, in turn; 28d: all five at once); recall and precision of the pairs within
  DEFAULT_DISTANCE, of the hashes `prep pack` stored, against imagehash's pHash of the same
  files (the reference); speed against imagehash (PIL, full-size decode), one thread each: the
  pHash of the pixels pack decoded anyway (28e), and the --drop-dupes pass's own decode (28f).
- 28g-h: near_pairs on 1,000,000 random hashes with 1,000 planted pairs, against a brute-force
  numpy popcount over 20,000 of them, extrapolated to 10^6 (x 2,500); the two methods.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from bench_pack import jpeg_list
from rows import PREP, Row, info, prep, timed, versus

DHASH_SHAPE = (8, 9)  # (h, w) of the dHash thumbnail: 8 rows of 8 left-right differences


def dhash(gray: np.ndarray) -> np.ndarray:
    """(N, 8, 9) uint8 -> (N,) uint64: a bit 1 where a pixel is brighter than its left (the
    dHash the pHash is measured against)."""
    from prep.media.image.groups import pack_bits

    x = np.asarray(gray, dtype=np.int16)
    return pack_bits(x[:, :, 1:] > x[:, :, :-1])


EDITS = ("q60", "resize 0.8", "shift 4 px", "brightness +15", "crop 5%")


def edit(img: np.ndarray, edits: tuple[str, ...]) -> bytes:
    """A near-duplicate of an upright RGB image, as JPEG bytes (q90 unless q60): `edits` of
    EDITS applied in turn."""
    import cv2
    from PIL import Image

    for which in edits:
        h, w = img.shape[:2]
        if which == "resize 0.8":
            img = cv2.resize(img, (int(w * 0.8), int(h * 0.8)), interpolation=cv2.INTER_AREA)
        elif which == "shift 4 px":
            img = np.pad(img[:-4, :-4], ((4, 0), (4, 0), (0, 0)), mode="edge")
        elif which == "brightness +15":
            img = np.clip(img.astype(np.int16) + 15, 0, 255).astype(np.uint8)
        elif which == "crop 5%":
            dy, dx = h // 40, w // 40  # 2.5% off each edge: 5% of each side
            img = img[dy : h - dy, dx : w - dx]
    buf = io.BytesIO()
    quality = 60 if "q60" in edits else 90
    Image.fromarray(np.ascontiguousarray(img)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def plant(paths: list[str], folder: Path, combined: bool) -> set[tuple[int, int]]:
    """Copy `paths` into folder/a/, and one edited copy of every tenth into folder/b/ (one edit
    each, in turn; `combined`: all five); the planted (original, copy) index pairs in the
    sorted listing prep pack makes."""
    from PIL import Image, ImageOps

    shutil.rmtree(folder, ignore_errors=True)
    (folder / "a").mkdir(parents=True)
    (folder / "b").mkdir()
    for k, p in enumerate(paths):
        shutil.copy(p, folder / "a" / f"{k:05d}.jpg")
    chosen = list(range(0, len(paths), 10))
    for n, k in enumerate(chosen):
        with Image.open(paths[k]) as im:
            img = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        edits = EDITS if combined else (EDITS[n % len(EDITS)],)
        (folder / "b" / f"{k:05d}.jpg").write_bytes(edit(img, edits))
    return {(k, len(paths) + n) for n, k in enumerate(chosen)}


def scores(h: np.ndarray, truth: set[tuple[int, int]], d: int) -> tuple[float, float]:
    """(recall, precision) of the pairs within d bits against the planted pairs."""
    from prep.inspect.dupes import near_pairs

    found = {(int(i), int(j)) for i, j, _ in near_pairs(h, max_distance=d).tolist()}
    hit = len(found & truth)
    return hit / len(truth), hit / len(found) if found else 1.0


def imagehash_all(files: list[Path]) -> np.ndarray:
    """The reference: imagehash's pHash of each file, upright (PIL, full-size decode)."""
    import imagehash
    from PIL import Image, ImageOps

    out = []
    for f in files:
        with Image.open(f) as im:
            out.append(int(str(imagehash.phash(ImageOps.exif_transpose(im))), 16))
    return np.array(out, dtype=np.uint64)


def best_of(reps: int, fns: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Interleaved repeats: the best seconds of each."""
    best = {k: float("inf") for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            best[k] = min(best[k], timed(fn))
    return best


def planted_set(args: argparse.Namespace, work: Path, combined: bool) -> tuple[Path, Path, set]:
    """The planted folder, its pack (the hashes prep pack stores), and the planted pairs."""
    _, paths = jpeg_list(work / "raw", args.count)
    paths = paths[:: max(1, len(paths) // args.sample)][: args.sample]
    name = "-all" if combined else ""
    folder, out = work / f"dupes-planted{name}", work / f"dupes-packed{name}"
    truth = plant(paths, folder, combined)
    prep("pack", str(folder), str(out), "--sizes", "256", "-j", str(args.jobs), "--overwrite")
    return folder, out, truth


def speeds(
    args: argparse.Namespace,
    files: list[Path],
    decoded: list[np.ndarray],
    ref: dict[str, np.ndarray],
) -> dict:
    """Seconds, one thread each, for all `files`: the pHash of the pixels pack decoded (what
    hashing adds to prep pack), the --drop-dupes pass (its own 1/8-scale decode), imagehash."""
    from prep.kinds.images.config import PackConfig
    from prep.kinds.images.dupes import _hash_one
    from prep.media.image.groups import image_phash
    from prep.sources.images import Item

    items = [Item(f, f.name) for f in files]
    cfg = PackConfig(src=str(files[0].parent), jobs=1)
    return best_of(
        args.reps,
        {
            "pack": lambda: [image_phash(img) for img in decoded],
            "pass": lambda: [_hash_one(it, cfg) for it in items],
            "ref": lambda: ref.update(h=imagehash_all(files)),
        },
    )


def planted_rows(args: argparse.Namespace, work: Path) -> list[Row]:
    from prep.inspect.dupes import DEFAULT_DISTANCE as D
    from prep.inspect.dupes import dataset_hashes
    from prep.media.image.decode import decode_image
    from prep.media.image.groups import thumbnail

    folder, out, truth = planted_set(args, work, combined=False)
    files, ref = sorted(folder.rglob("*.jpg")), {}
    decoded = [decode_image(f, (256,))[0] for f in files]  # as pack decodes for --sizes 256
    t = speeds(args, files, decoded, ref)
    dh = scores(dhash(np.stack([thumbnail(i, DHASH_SHAPE) for i in decoded])), truth, D)
    (r, p), (r_ref, p_ref) = scores(dataset_hashes(out).phash, truth, D), scores(ref["h"], truth, D)
    folder, out, truth = planted_set(args, work, combined=True)
    copies = sorted((folder / "b").glob("*.jpg"))
    both = np.concatenate([ref["h"][: len(files) - len(copies)], imagehash_all(copies)])
    r_all, r_all_ref = scores(dataset_hashes(out).phash, truth, D)[0], scores(both, truth, D)[0]
    rate = {k: len(files) / v for k, v in t.items()}
    pct = {"r": r, "p": p, "r_ref": r_ref, "p_ref": p_ref, "dh_r": dh[0], "dh_p": dh[1]}
    pct |= {"all": r_all, "all_ref": r_all_ref}
    return _rows(D, len(files), {k: 100 * v for k, v in pct.items()}, rate)


def _rows(d: int, n: int, pct: dict[str, float], rate: dict[str, float]) -> list[Row]:
    ih, ph = "info (ref: imagehash)", "info (ref: pHash)"
    r, p = pct["r"], pct["p"]
    return [
        Row(f"28b dupes recall at {d} bits vs imagehash", r, pct["r_ref"], "%", ">= 95", r >= 95),
        Row(f"28c dupes precision, {d} bits, vs imagehash", p, pct["p_ref"], "%", ">= 99", p >= 99),
        info(f"28d recall, all five edits at once, {d} bits", pct["all"], pct["all_ref"], "%", ih),
        versus(
            f"28e pHash at pack vs imagehash, {n} img", rate["pack"], rate["ref"], "img/s", ">= 10x"
        ),
        info(
            "28f --drop-dupes pass (1/8 decode) vs imagehash",
            rate["pass"],
            rate["ref"],
            "img/s",
            ih,
        ),
        info(f"28i dHash recall at {d} bits vs pHash", pct["dh_r"], r, "%", ph),
        info(f"28j dHash precision, {d} bits, vs pHash", pct["dh_p"], p, "%", ph),
    ]


def wall_and_cpu(args: list[str]) -> tuple[float, float]:
    """Wall seconds of a child process, and its CPU seconds (user + system, all its threads):
    the CPU time is less swayed than the wall time by the other work of a shared machine."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{args} failed: {proc.stderr.read() if proc.stderr else ''}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def overhead_rows(args: argparse.Namespace, work: Path) -> list[Row]:
    """prep pack of the bench photos with and without its hashes, interleaved, best of each."""
    lst, paths = jpeg_list(work / "raw", args.count)
    common = ["--sizes", "256", "--overwrite", "-q", "-j", str(args.jobs)]
    runs = {
        "hashed": [*PREP, "pack", str(lst), str(work / "dupes-h"), *common],
        "plain": [*PREP, "pack", str(lst), str(work / "dupes-n"), *common, "--no-hashes"],
    }
    best = {k: (float("inf"), float("inf")) for k in runs}
    for _ in range(1 if args.smoke else max(3, args.reps)):
        for k, cmd in runs.items():
            wall, cpu = wall_and_cpu(cmd)
            best[k] = (min(best[k][0], wall), min(best[k][1], cpu))
    (wall, cpu), (wall_ref, cpu_ref), n = best["hashed"], best["plain"], len(paths)
    return [
        versus(f"28a pack 256px, hashes vs none, {n} img", wall, wall_ref, "s", "<= 1.05x"),
        versus(f"28k pack CPU, hashes vs none, {n} img", cpu, cpu_ref, "s", "<= 1.05x"),
    ]


def planted_hashes(
    n: int, pairs: int, d: int, seed: int = 0
) -> tuple[np.ndarray, set[tuple[int, int]]]:
    """n random hashes, `pairs` of them copied to another place with 1..d bits flipped."""
    rng = np.random.default_rng(seed)
    h = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(
        0, 2, n, dtype=np.uint64
    )
    idx = rng.permutation(n)[: 2 * pairs].reshape(2, pairs)
    for a, b in idx.T.tolist():
        flips = rng.choice(64, int(rng.integers(1, d + 1)), replace=False)
        h[b] = h[a] ^ np.uint64(sum(1 << int(f) for f in flips))
    return h, {(min(a, b), max(a, b)) for a, b in idx.T.tolist()}


def search_rows(args: argparse.Namespace) -> list[Row]:
    from prep.inspect.dupes import DEFAULT_DISTANCE, near_pairs

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers import brute_force  # the tests' reference

    d = DEFAULT_DISTANCE
    n, sub, planted = (2_000, 2_000, 100) if args.smoke else (1_000_000, 20_000, 1000)
    h, truth = planted_hashes(n, planted, d)
    found: dict[str, np.ndarray] = {}
    t = best_of(
        args.reps,
        {
            "ours": lambda: found.update(r=near_pairs(h, max_distance=d)),
            "brute": lambda: brute_force(h[:sub], h[:sub], d),
        },
    )
    brute = t["brute"] * (n / sub) ** 2
    got = {(int(i), int(j)) for i, j, _ in found["r"].tolist()}
    ok = truth <= got and t["ours"] < 10
    small = planted_hashes(2_000 if args.smoke else 100_000, planted, d)[0]
    m = best_of(
        1, {k: (lambda k=k: near_pairs(small, max_distance=d, method=k)) for k in ("mih", "tables")}
    )
    return [
        Row(
            f"28g near pairs, {n:,} hashes, {len(truth & got)}/{len(truth)} found",
            t["ours"],
            brute,
            "s",
            "< 10 s",
            ok,
        ),
        info(
            f"28h {len(small):,} hashes at {d} bits: tables vs mih",
            m["tables"],
            m["mih"],
            "s",
            "info (ref: mih)",
        ),
    ]


def rows(args: argparse.Namespace, work: Path) -> list[Row]:
    return [*overhead_rows(args, work), *planted_rows(args, work), *search_rows(args)]
