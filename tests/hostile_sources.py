"""Hostile source files for `prep import` (issue 34): COCO instances files and caption lists
(CSV, JSON lines, Parquet) here, Hugging Face folders and WebDataset tars in
tests/hostile_archives.py, each made from the demo's own (tests/hostile_base.py's RAW) and
changed the way a stranger's could be. Each case's `outside` folder holds a valid image
(`secret.png`) and Arrow file (`data.arrow`) that a path of the source points at: an import
that reads one is caught by tests/hostile_run.py's audit. `says`: what the output or rejects.jsonl
must say (the reject code, or the file named); an import that finishes must verify."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostile_archives import ARCHIVES, arrow
from hostile_base import Make, Source

# ------------------------------------------------------------------ COCO


def coco(change: Callable[[dict[str, Any]], Any], images: bool = False) -> Make:
    """raw/coco.json changed by `change` (editing the dict, or returning the file's text);
    `images`: IMAGES a copy of raw/images in SRC, with link.png, a link to outside's secret."""

    def make(raw: Path, src: Path, outside: Path) -> list[str]:
        data = json.loads((raw / "coco.json").read_text())
        text = change(data)
        (src / "coco.json").write_text(text if isinstance(text, str) else json.dumps(data))
        folder = src / "images" if images else raw / "images"
        if images:
            shutil.copytree(raw / "images", folder)
            (folder / "link.png").symlink_to(outside / "secret.png")
        text = (src / "coco.json").read_text().replace("OUTSIDE", str(outside))
        (src / "coco.json").write_text(text)
        return [str(src / "coco.json"), str(folder)]

    return make


def first(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["images"][0][key] = value

    return change


def frame(w: int, h: int) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["images"][0].update(width=w, height=h)

    return change


def first_ann(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["annotations"][0][key] = value

    return change


def _rle(counts: Any) -> Callable[[dict[str, Any]], Any]:
    """The first annotation's segmentation an RLE of its image's size holding `counts`."""

    def change(data: dict[str, Any]) -> Any:
        a = data["annotations"][0]
        im = next(im for im in data["images"] if im["id"] == a["image_id"])
        a["segmentation"] = {"counts": counts, "size": [im["height"], im["width"]]}

    return change


def _keypoints(data: dict[str, Any]) -> None:
    data["categories"][0]["keypoints"] = ["a", "b"]
    data["annotations"][0]["keypoints"] = [1, 2, 2, 3]  # not whole (x, y, v) points


def before_images(text: str) -> Callable[[dict[str, Any]], str]:
    """The file with `"x": TEXT` before its images (what no dict can hold)."""
    return lambda data: json.dumps(data).replace('"images": [', f'"x": {text}, "images": [', 1)


# ------------------------------------------------------------------ pairs


def pairs(rows: Callable[[Path, Path], list[dict[str, Any]]], suffix: str = ".csv") -> Make:
    """A caption list in SRC beside a copy of raw/images: `rows(src, outside)`'s rows after
    the demo's first three (path, caption)."""

    def make(raw: Path, src: Path, outside: Path) -> list[str]:
        import csv

        shutil.copytree(raw / "images", src / "images")
        found = sorted(p.relative_to(src).as_posix() for p in (src / "images").rglob("*.*"))[:3]
        listed = [{"path": p, "caption": f"image {i}"} for i, p in enumerate(found)]
        listed += rows(src, outside)
        path = src / f"pairs{suffix}"
        if suffix == ".csv":
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, ["path", "caption"])
                w.writeheader()
                w.writerows(listed)
        elif suffix == ".jsonl":
            path.write_text(
                "".join(r["raw"] if "raw" in r else json.dumps(r) + "\n" for r in listed)
            )
        else:
            _parquet_pairs(path, listed, src)
        return [str(path), "--image-column", "path", "--text-column", "caption"]

    return make


def _parquet_pairs(path: Path, rows: list[dict[str, Any]], src: Path) -> None:
    """Rows as Hugging Face writes images: a struct of bytes (None here) and path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    image = [{"bytes": None, "path": r["path"]} for r in rows]
    pq.write_table(pa.table({"path": image, "caption": [r["caption"] for r in rows]}), path)


def row(path: Callable[[Path, Path], str], caption: Any = "a secret") -> Callable[..., Any]:
    return lambda src, outside: [{"path": path(src, outside), "caption": caption}]


def link_out(src: Path, outside: Path) -> str:
    (src / "images" / "link.png").symlink_to(outside / "secret.png")
    return "images/link.png"


def line(text: str) -> Callable[..., Any]:
    return lambda src, outside: [{"raw": text}]


SECRET = lambda src, outside: str(outside / "secret.png")  # noqa: E731
UP = lambda src, outside: "../outside/secret.png"  # noqa: E731
OUTSIDE = "outside"  # the reject code of a path that leaves the source
SOURCES = [
    # COCO: file_name out of IMAGES, frames and segmentations that claim too much, bad JSON
    Source(
        "COCO file_name ../",
        "coco",
        coco(first("file_name", "../../outside/secret.png"), True),
        OUTSIDE,
    ),
    Source(
        "COCO file_name absolute", "coco", coco(first("file_name", "OUTSIDE/secret.png")), OUTSIDE
    ),
    Source(
        "COCO file_name a link out", "coco", coco(first("file_name", "link.png"), True), OUTSIDE
    ),
    Source(
        "COCO frame 8000 x 8000 with --instances",
        "coco",
        coco(frame(8000, 8000)),
        "box_frame|too_large",
        ("--instances",),
    ),
    Source(
        "COCO frame of 10^6 x 10^6", "coco", coco(frame(10**6, 10**6)), "too_large", ("--masks",)
    ),
    Source(
        "COCO nested 100,000 deep",
        "coco",
        coco(before_images("[" * 10**5 + "]" * 10**5)),
        "coco.json",
    ),
    Source("COCO a 5000-digit integer", "coco", coco(before_images("9" * 5000)), "coco.json"),
    Source(
        "COCO categories an object",
        "coco",
        coco(lambda d: d.update(categories={"1": "a"})),
        "coco.json",
    ),
    Source(
        "COCO compressed RLE cut short",
        "coco",
        coco(_rle("0a")),
        "bad_segmentation",
        ("--instances",),
    ),
    Source(
        "COCO RLE counts Infinity",
        "coco",
        coco(_rle([float("inf")])),
        "bad_segmentation",
        ("--instances",),
    ),
    Source(
        "COCO RLE counts negative",
        "coco",
        coco(_rle([-5, 10**9])),
        "bad_segmentation",
        ("--masks",),
    ),
    Source(
        "COCO polygon at 1e308",
        "coco",
        coco(first_ann("segmentation", [[1e308, 0, 0, 1e308, 5, 5]])),
        "bad_segmentation",
        ("--masks",),
    ),
    Source(
        "COCO bbox of strings",
        "coco",
        coco(first_ann("bbox", ["a", "b", "c", "d"])),
        "bad_annotation",
    ),
    Source("COCO bbox NaN", "coco", coco(first_ann("bbox", [float("nan")] * 4)), ""),
    Source(
        "COCO keypoints not whole points",
        "coco",
        coco(_keypoints),
        "bad_annotation",
        ("--keypoints",),
    ),
    Source(
        "COCO an image entry a string",
        "coco",
        coco(lambda d: d["images"].__setitem__(0, "x.png")),
        "bad_annotation",
    ),
    Source("COCO image_id a list", "coco", coco(first_ann("image_id", [1])), ""),
    # caption lists
    Source("pairs path ../", "pairs", pairs(row(UP)), OUTSIDE),
    Source("pairs path absolute", "pairs", pairs(row(SECRET)), OUTSIDE),
    Source("pairs path a link out", "pairs", pairs(row(link_out)), OUTSIDE),
    Source("pairs .jsonl path ../", "pairs", pairs(row(UP), ".jsonl"), OUTSIDE),
    Source(
        "pairs .jsonl nested 100,000 deep",
        "pairs",
        pairs(line("[" * 10**5 + "]" * 10**5 + "\n"), ".jsonl"),
        "pairs.jsonl:4",
    ),
    Source(
        "pairs .jsonl a 5000-digit integer",
        "pairs",
        pairs(line('{"path": ' + "1" * 5000 + "}\n"), ".jsonl"),
        "pairs.jsonl:4",
    ),
    Source(
        "pairs .jsonl a row that is a list",
        "pairs",
        pairs(line("[1, 2]\n"), ".jsonl"),
        "pairs.jsonl",
    ),
    Source(
        "pairs caption a number", "pairs", pairs(row(lambda s, o: "images/x.png", 5), ".jsonl"), ""
    ),
    Source("pairs Parquet image struct path ../", "pairs", pairs(row(UP), ".parquet"), OUTSIDE),
    *ARCHIVES,
]


def build_sources(top: Path) -> None:
    """Each source case in top/source-NN: src/ (what it reads), outside/ (what it must not),
    scratch/, cache/, and args.json (the arguments of `prep import IMPORTER` before OUT)."""
    from PIL import Image

    for i, source in enumerate(SOURCES):
        folder = top / f"source-{i:02d}"
        for sub in ("src", "outside", "scratch", "cache"):
            (folder / sub).mkdir(parents=True)
        Image.new("RGB", (20, 20), (1, 2, 3)).save(folder / "outside" / "secret.png")
        arrow(folder / "outside" / "data.arrow")
        args = source.make(top / "raw", folder / "src", folder / "outside")
        (folder / "args.json").write_text(json.dumps(args))


def run_source(source: Source, args: list[str], out: Path) -> dict[str, str]:
    """`prep import` of the case (`args`: before OUT) to `out`; when it finishes, `prep
    verify` of what it wrote."""
    from hostile_run import cli

    options = ["--sizes", "16", "--max-rejects", "1", "-j", "1", "-q", *source.options]
    got = {"import": cli(["import", source.importer, *args, out, *options], source.says)}
    if got["import"] == "ok":
        got["verify"] = cli(["verify", out], "")
    return got


def source_judge(source: Source, got: dict[str, str], out: Path) -> list[str]:
    """A crash, a refusal that does not say `source.says`, a finished import whose rejects do
    not, or one whose dataset does not verify."""
    import re

    bad = [f"{r}: {o}" for r, o in got.items() if o.startswith("crash")]
    if got["import"].startswith("vague"):
        bad.append(f"import should say /{source.says}/: {got['import']}")
    if got["import"] == "ok":
        rejects = (out / "rejects.jsonl").read_text() if (out / "rejects.jsonl").is_file() else ""
        if not re.search(source.says, rejects):
            bad.append(f"rejects.jsonl should say /{source.says}/: {rejects[:300]!r}")
        if got.get("verify") != "ok":
            bad.append(f"what it wrote does not verify: {got.get('verify')}")
    return bad
