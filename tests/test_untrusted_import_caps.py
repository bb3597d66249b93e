"""A tiny source must not cost a huge amount: each importer's amplification is bounded before
the work. Memory is measured as the peak RSS of a `prep` process (in a subprocess of its own,
so that no earlier test's peak hides it), against the same import of an honest source:

- a COCO file claiming 8000 x 8000 for a 20 x 20 image (or an RLE claiming 20000 x 20000) with
  `--instances` is refused before any mask is drawn; a claim over --max-pixels is `too_large`;
- a Parquet file of 1M repeated rows (a few KB) with --limit 10 reads a batch, not the table;
- a WebDataset member over --max-member-mb (a 1 GiB member: a sparse tar here, a 1 MB
  .tar.gz in the wild) rejects its sample unread."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image as PILImage

PREP = str(Path(sys.executable).with_name("prep"))
PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
)


def peak_mb(*args: str) -> int:
    """The peak RSS (MB) of `prep ARGS`, which must succeed."""
    said = subprocess.run(
        [sys.executable, "-c", PEAK, PREP, *args, "-q", "--jobs", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    code, mb = said.stdout.split()
    assert code == "0", said.stderr
    return int(mb)


def rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["path"]: r["reason"] for r in map(json.loads, lines)}


def write_coco(root: Path, claims: bool) -> Path:
    """Three 20 x 20 images with one instance each; with `claims`, a.png's entry says 8000 x
    8000, b.png's RLE says 20000 x 20000, c.png's entry 12000 x 12000 (over --max-pixels)."""
    images, anns = [], []
    for i, name in enumerate(["a.png", "b.png", "c.png"]):
        PILImage.new("RGB", (20, 20), (40 * i, 0, 0)).save(root / name)
        side = {"a.png": 8000, "c.png": 12000}.get(name, 20) if claims else 20
        images.append({"id": i, "file_name": name, "width": side, "height": side})
        seg: object = [[2, 2, 10, 2, 10, 10, 2, 10]]
        if name == "b.png":
            rle = 20000 if claims else 20
            seg = {"size": [rle, rle], "counts": [rle * rle]}
        for j in range(3):  # three instances: --instances draws three masks
            anns.append({"id": 10 * i + j, "image_id": i, "category_id": 1,
                         "bbox": [2, 2, 8, 8], "segmentation": seg})  # fmt: skip
    data = {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "x"}]}
    (root / "coco.json").write_text(json.dumps(data))
    return root / "coco.json"


def test_coco_claimed_sizes_are_checked_before_any_mask(tmp_path: Path) -> None:
    peaks = {}
    for claims in (False, True):
        root = tmp_path / f"claims{claims}"
        root.mkdir()
        src, out = write_coco(root, claims), root / "out"
        args = ["import", "coco", str(src), str(root), str(out), "--instances", "--sizes", "16"]
        peaks[claims] = peak_mb(*args, "--max-rejects", "1")
    assert rejects(tmp_path / "claimsTrue" / "out") == {
        "a.png": "box_frame",
        "b.png": "bad_segmentation",
        "c.png": "too_large",
    }
    assert not (tmp_path / "claimsFalse" / "out" / "rejects.jsonl").read_text()
    # Drawing the claimed masks would take 3 x 64 MB for a.png and 400 MB for b.png.
    assert peaks[True] < peaks[False] + 100, peaks


def test_parquet_limit_reads_a_batch_not_the_table(tmp_path: Path) -> None:
    PILImage.new("RGB", (8, 8)).save(tmp_path / "a.png")
    peaks = {}
    for n in (10, 1_000_000):
        table = pa.table({"image": ["a.png"] * n, "caption": ["a cat on a mat"] * n})
        src = tmp_path / f"rows{n}.parquet"
        pq.write_table(table, src)
        out = tmp_path / f"out{n}"
        peaks[n] = peak_mb("import", "pairs", str(src), str(out), "--limit", "10", "--sizes", "8")
    assert (tmp_path / "rows1000000.parquet").stat().st_size < 100_000
    # As Python dicts, the million rows would take some 600 MB.
    assert peaks[1_000_000] < peaks[10] + 100, peaks


def member(tar: io.BufferedWriter, name: str, data: bytes = b"", size: int | None = None) -> None:
    """A tar member; with `size`, one of that many zero bytes, skipped over (a sparse file)."""
    info = tarfile.TarInfo(name)
    info.size = len(data) if size is None else size
    tar.write(info.tobuf(format=tarfile.USTAR_FORMAT))
    if size is None:
        tar.write(data + bytes(-len(data) % 512))
    else:
        tar.seek(-(-size // 512) * 512, io.SEEK_CUR)


def png_bytes() -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(np.full((8, 8, 3), 9, np.uint8)).save(out, format="PNG")
    return out.getvalue()


def test_a_member_over_the_cap_rejects_its_sample_unread(tmp_path: Path) -> None:
    tar = tmp_path / "shard-000.tar"
    with open(tar, "wb") as f:
        member(f, "big.png", size=1 << 30)  # 1 GiB of zeros, never written: a sparse file
        member(f, "big.cls", b"1")
        member(f, "ok.png", png_bytes())
        member(f, "ok.cls", b"2")
        f.write(bytes(1024))  # the end-of-archive blocks
    out = tmp_path / "out"
    peak = peak_mb("import", "webdataset", str(tar), str(out), "--sizes", "8", "--max-rejects", "1")
    assert rejects(out) == {f"{tar}:big": "member_too_large"}
    assert "1,073,741,824 bytes, over --max-member-mb 256" in (out / "rejects.jsonl").read_text()
    assert peak < 600  # reading the member would take 1 GiB
    # A .tar.gz (where a gigabyte of zeros is a megabyte), with a cap of one's own.
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        for name, data in [("big.png", bytes(3_000_000)), ("ok.png", png_bytes())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    (tmp_path / "small.tar.gz").write_bytes(gzip.compress(raw.getvalue()))
    out = tmp_path / "gz"
    args = ["import", "webdataset", str(tmp_path / "small.tar.gz"), str(out), "--sizes", "8"]
    peak_mb(*args, "--max-member-mb", "1", "--max-rejects", "1")
    assert rejects(out) == {f"{tmp_path / 'small.tar.gz'}:big": "member_too_large"}
