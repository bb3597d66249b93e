"""The small packs the hostile corpus (tests/hostile.py) starts from, and the helpers that change
a packed dataset: its manifest edited (`edit_manifest`, the ONE place the corpus and the fuzz
tests touch manifest.json: a change of the on-disk format changes it alone; `edit_as_written`
for the cases of the shard index, which edit_manifest lists inline), an array or an index file
rewritten, every checksum recomputed."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import manifests
import numpy as np

Manifest = dict[str, Any]
MANIFEST = "manifest.json"
OPEN, VERIFY, INFO, PREVIEW, REPORT = "open", "verify", "info", "preview", "report"
ALL = frozenset((OPEN, VERIFY, INFO, PREVIEW, REPORT))
READ = frozenset((OPEN, VERIFY))
NONE: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Case:
    """One hostile dataset: `base` changed by `change(root, outside)`. `refuse`: the readers
    that must refuse it, with an error matching `names` (the file at fault); the others may
    also refuse it, in one line. `url`: it can be put at a URL (a FIFO or a link cannot)."""

    name: str
    base: str
    change: Callable[[Path, Path], None]
    refuse: frozenset[str]
    names: str
    url: bool = True
    note: str = ""


Make = Callable[[Path, Path, Path], list[str]]  # (raw, src, outside) -> arguments before OUT


@dataclass(frozen=True)
class Source:
    """One hostile source for `prep import IMPORTER`: `make` writes it into SRC (a path in it
    may point at a file of `outside`) and gives the arguments before OUT; `says`: what the
    output or rejects.jsonl must say (a reject code, the file named); `options`: after OUT."""

    name: str
    importer: str
    make: Make
    says: str = ""
    options: tuple[str, ...] = ()


def manifest_of(root: Path) -> Manifest:
    """The manifest of `root` as a dict in manifest.json's form, its shards listed inline
    (tests/manifests.py: format version 4 keeps them in a shard index)."""
    return manifests.load(root)


def edit_manifest(root: Path, change: Callable[[Manifest], str | None]) -> None:
    """`change` edits the manifest of `root` as a dict in manifest.json's form ({} where it has
    none), or returns the text to write instead (a manifest no dict holds: nested past what the
    parser takes)."""
    m = manifest_of(root) if (root / MANIFEST).is_file() else {}
    text = change(m)
    if text is None:
        manifests.save(root, m)
    else:
        (root / MANIFEST).write_text(text)


def edit_as_written(root: Path, change: Callable[[Manifest], None]) -> None:
    """`change` edits manifest.json as it is written: a version 4 manifest keeps its `index`
    entry (and the shard index files it names), where edit_manifest lists the shards inline."""
    path = root / MANIFEST
    m = json.loads(path.read_text())
    change(m)
    path.write_text(json.dumps(m, indent=1))


def reindex(root: Path, name: str, data: np.ndarray | bytes, **save_kw: Any) -> None:
    """Shard index file `name` (shards.npy, sha256.npy) holds `data` now (an array, or the
    file's bytes), its byte size and sha256 in the manifest's `index` entry recomputed: the lie
    is in the content only."""
    if isinstance(data, bytes):
        (root / name).write_bytes(data)
    else:
        with open(root / name, "wb") as f:
            np.save(f, data, **save_kw)
    blob = (root / name).read_bytes()
    info = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    edit_as_written(root, lambda m: m["index"]["files"].update({name: info}))


def digest(root: Path) -> None:
    """Every listed file's byte size and sha256 recomputed: the lie is in the content only."""

    def change(m: Manifest) -> None:
        for shard in m["shards"]:
            for rel, info in shard["files"].items():
                path = Path(rel) if os.path.isabs(rel) else root / rel
                if path.is_file():
                    data = path.read_bytes()
                    info.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())

    edit_manifest(root, change)


def rewrite(root: Path, rel: str, data: np.ndarray, relength: bool = False, **save_kw: Any) -> None:
    """File `rel` holds `data` now (a .npy), its checksums recomputed; `relength`: the
    manifest's first-axis length of what the file holds is len(data) too."""
    with open(root / rel, "wb") as f:
        np.save(f, data, **save_kw)
    if relength:

        def change(m: Manifest) -> None:
            for shard in m["shards"]:
                for ref in shard["arrays"].values():
                    for r in (ref, ref.get("offsets") or {}):
                        if r.get("file") == rel:
                            r["length"] = len(data)

        edit_manifest(root, change)
    digest(root)


def edit(change: Callable[[Manifest], str | None]) -> Callable[[Path, Path], None]:
    """A case's change that edits the manifest only."""

    def apply(root: Path, outside: Path) -> None:
        edit_manifest(root, change)

    return apply


def npy(root: Path, rel: str) -> np.ndarray:
    return np.load(root / rel)


def make_bases(folder: Path, raw: Path) -> dict[str, Path]:
    """One small pack of each base a case starts from (a few seconds in all): 12 demo images
    at 32 px in shards of 4 (raw, jpeg, keep, h5), 6 documents, a 20-row table, 2 volumes with
    a target, samples of every field kind, 2 sounds, 4 videos (JPEG and raw frames), and the
    demo's COCO file, caption list, Hugging Face folder and WebDataset tars imported."""
    from prep.demo.images import make_demo
    from prep.demo.volumes import make_phantoms

    make_demo(raw, count=12, seed=0, jobs=1, max_side=256, show_progress=False)
    (raw / "text").mkdir(exist_ok=True)
    for i in range(6):
        (raw / "text" / f"d{i}.txt").write_text(f"document {i} " * (i + 5))
    rows = "".join(f"{'abc'[i % 3]},{i * 1.5},{i % 2}\n" for i in range(20))
    (raw / "rows.csv").write_text("city,price,label\n" + rows)
    make_phantoms(raw / "ct", count=2, seed=1, side=16, dicom=False)
    (raw / "ct" / "targets.csv").write_text("scan,grade\nct_000,low\nct_001,high\n")
    images = [str(raw / "images"), "--sizes", "32", "--shard-size", "4"]
    ct = raw / "ct"
    imported = ["--sizes", "32", "--shard-size", "6"]
    runs = {
        "images": ["pack", *images],
        "jpeg": ["pack", *images, "--codec", "jpeg"],
        "keep": ["pack", *images, "--mode", "keep"],
        "h5": ["pack", *images, "--format", "h5"],
        "tokens": ["tokenize", str(raw / "text"), "-t", "char"],
        "table": ["table", str(raw / "rows.csv"), "--target", "label", "--categorical", "city"],
        "volumes": [
            "volumes",
            str(ct / "images"),
            *("--labels", str(ct / "labels"), "--targets", str(ct / "targets.csv")),
        ],
        "audio": ["audio", str(_sounds(raw / "sounds")), "--mono"],
        "clips": ["video", str(_videos(raw / "videos")), "--fps", "4", "--size", "16"],
        "coco": [
            *("import", "coco", str(raw / "coco.json"), str(raw / "images"), *imported),
            *("--mode", "keep", "--codec", "jpeg", "--masks", "--instances"),
        ],
        "pairs": [
            *("import", "pairs", str(raw / "captions.csv"), *imported),
            *("--image-column", "path", "--text-column", "caption"),
            *("--tokenizer", str(_tokenizer(raw / "words.json"))),
        ],
        "hf": ["import", "hf", str(raw / "hf"), *imported],
        "wds": ["import", "webdataset", str(raw / "wds" / "shard-{000000..000001}.tar"), *imported],
    }
    runs["clips-raw"] = [*runs["clips"], "--codec", "raw"]
    runs["clips"] += ["--codec", "jpeg"]
    bases = {name: _run(args, folder / name) for name, args in runs.items()}
    bases["samples"] = _every_field(folder / "samples", raw / "words.json")
    return bases


def _run(args: list[str], out: Path) -> Path:
    """`prep ARGS` with OUT after the source(s): quietly, one job."""
    from typer.testing import CliRunner

    from prep.cli.main import app

    at = 3 if args[0] == "import" and args[1] != "coco" else 4 if args[0] == "import" else 2
    res = CliRunner().invoke(app, [*args[:at], str(out), *args[at:], "-j", "1", "-q"])
    assert res.exit_code == 0, res.output
    return out


def _tokenizer(path: Path) -> Path:
    """A word-level tokenizer.json of 6 words."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["[UNK]", "a", "the", "cat", "circle", "square"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


def _sounds(folder: Path) -> Path:
    """Two 0.2 s WAVs at 16 kHz in class folders (the labels)."""
    import soundfile as sf

    for k, name in enumerate(("low", "high")):
        (folder / name).mkdir(parents=True, exist_ok=True)
        sf.write(folder / name / f"{k}.wav", np.sin(np.arange(3200) * 0.1 * (k + 1)), 16000)
    return folder


def _videos(folder: Path) -> Path:
    from prep.demo.video import make_video_demo

    make_video_demo(folder, per_class=1, seed=0)
    return folder


def _every_field(out: Path, words: Path) -> Path:
    """6 samples in shards of 3 holding every field kind prep.fields has: an image raw (with
    its mask), kept at its aspect (with boxes, keypoints and instance masks) and JPEG (with
    its mask), arrays fixed and ragged, a scalar, a label, tokens, text, bytes and JSON."""
    import prep
    from prep.fields import (
        Array,
        Boxes,
        Bytes,
        Image,
        Instances,
        Json,
        Keypoints,
        Label,
        Mask,
        Scalar,
        Text,
        Tokens,
    )

    fields = {
        "img": Image(sizes=(16,)),
        "mask": Mask("img"),
        "kimg": Image(sizes=(16,), mode="keep"),
        "boxes": Boxes("kimg"),
        "points": Keypoints("kimg", joints=2),
        "inst": Instances("kimg"),
        "jimg": Image(sizes=(16,), mode="keep", codec="jpeg"),
        "jmask": Mask("jimg"),
        "vec": Array("float32", (3,)),
        "rows": Array("int64", (None, 2)),
        "s": Scalar("float64"),
        "y": Label(("cat", "dog")),
        "tok": Tokens(words),
        "t": Text(),
        "b": Bytes(),
        "j": Json(),
    }
    rng = np.random.default_rng(0)

    def make(i: int) -> dict[str, Any]:
        h, w = 20 + 2 * i, 28 - i
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        mask = (np.arange(h * w).reshape(h, w) % 3).astype(np.uint8)
        boxes = np.array([[1, 2, 10, 12], [0, 0, w, h]][: 1 + i % 2], np.float32)
        return {
            "img": pixels,
            "mask": mask,
            "kimg": pixels,
            "boxes": boxes,
            "points": np.array([[[2, 3, 2], [5, 6, 1]]] * len(boxes), np.float32),
            "inst": np.stack([mask == k for k in range(len(boxes))]).astype(np.uint8),
            "jimg": pixels,
            "jmask": mask,
            "vec": np.full(3, i, np.float32),
            "rows": np.arange(2 * i, dtype=np.int64).reshape(i, 2),
            "s": i / 2,
            "y": ["cat", "dog"][i % 2],
            "tok": "the cat" if i % 2 else "a circle",
            "t": f"caption {i} é",
            "b": bytes([i, 0, 255]),
            "j": {"id": i, "tags": ["a"] * i},
        }

    prep.pack_samples(make, list(range(6)), out, fields, jobs=1, shard_size=3, show_progress=False)
    return out
