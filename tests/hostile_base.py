"""The small packs the hostile corpus (tests/hostile.py) starts from, and the helpers that change
a packed dataset: its manifest edited, an array rewritten, every checksum recomputed."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import manifests
import numpy as np

Manifest = dict[str, Any]


def load(root: Path) -> Manifest:
    """The manifest as JSON, its shards listed inline (tests/manifests.py)."""
    return manifests.load(root)


def save(root: Path, m: Manifest, text: str | None = None) -> None:
    """`m` as the manifest (its shard index gone), or `text` as it is."""
    if text is None:
        manifests.save(root, m)
    else:
        (root / "manifest.json").write_text(text)


def digest(root: Path) -> None:
    """Every listed file's byte size and sha256 recomputed: the lie is in the content only."""
    m = load(root)
    for shard in m["shards"]:
        for rel, info in shard["files"].items():
            path = Path(rel) if os.path.isabs(rel) else root / rel
            if path.is_file():
                data = path.read_bytes()
                info.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    save(root, m)


def rewrite(root: Path, rel: str, data: np.ndarray, **save_kw: Any) -> None:
    """File `rel` holds `data` now (a .npy), its checksums recomputed."""
    with open(root / rel, "wb") as f:
        np.save(f, data, **save_kw)
    digest(root)


def edit(change: Callable[[Manifest], None]) -> Callable[[Path, Path], None]:
    def apply(root: Path, outside: Path) -> None:
        m = load(root)
        change(m)
        save(root, m)

    return apply


def npy(root: Path, rel: str) -> np.ndarray:
    return np.load(root / rel)


def make_bases(folder: Path, raw: Path) -> dict[str, Path]:
    """One small pack of each base a case starts from (about a second in all): 12 demo images
    at 32 px in shards of 4 (raw, jpeg, keep, h5), 6 documents, a 20-row table, 2 volumes."""
    from typer.testing import CliRunner

    from prep.cli.main import app
    from prep.demo.images import make_demo
    from prep.demo.volumes import make_phantoms

    make_demo(raw, count=12, seed=0, jobs=1, max_side=256, show_progress=False)
    (raw / "text").mkdir(exist_ok=True)
    for i in range(6):
        (raw / "text" / f"d{i}.txt").write_text(f"document {i} " * (i + 5))
    rows = "".join(f"{'abc'[i % 3]},{i * 1.5},{i % 2}\n" for i in range(20))
    (raw / "rows.csv").write_text("city,price,label\n" + rows)
    make_phantoms(raw / "ct", count=2, seed=1, side=16, dicom=False)
    images = [str(raw / "images"), "--sizes", "32", "--shard-size", "4", "-j", "1"]
    runs = {
        "images": ["pack", *images],
        "jpeg": ["pack", *images, "--codec", "jpeg"],
        "keep": ["pack", *images, "--mode", "keep"],
        "h5": ["pack", *images, "--format", "h5"],
        "tokens": ["tokenize", str(raw / "text"), "-t", "char"],
        "table": ["table", str(raw / "rows.csv"), "--target", "label", "--categorical", "city"],
        "volumes": ["volumes", str(raw / "ct" / "images"), "--labels", str(raw / "ct" / "labels")],
    }
    bases = {}
    for name, args in runs.items():
        out = folder / name
        res = CliRunner().invoke(app, [args[0], args[1], str(out), *args[2:], "-q"])
        assert res.exit_code == 0, res.output
        bases[name] = out
    return bases
