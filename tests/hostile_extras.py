"""Hostile cases of every `extra` entry prep writes (FORMAT.md; issue 34): each replaced by a
value of another type or range, or removed, in the manifest of the base that has it. What the
readers, `prep info` and the report read from `extra` must be checked before it is used (one
FormatError line) or shown as it is; never a traceback, never a file it names opened."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostile_base import ALL, NONE, READ, Case, Manifest, edit_manifest

GONE = object()  # the entry removed
DEEP: Any = []
for _ in range(900):  # as deep as json.dumps goes: deeper than a recursive walk of it
    DEEP = [DEEP]

# (base, path in extra, value, the readers that must refuse it, naming `extra`)
LIES: list[tuple[str, tuple[Any, ...], Any, frozenset[str]]] = [
    # images: stats (per size), background, jpeg, inputs
    ("images", ("stats",), [1, 2], ALL),
    ("images", ("stats", "sizes", "32", "mean"), "grey", ALL),
    ("images", ("stats", "sizes", "32", "std"), [-1, 0, 0], ALL),
    ("keep", ("stats", "sizes", "32", "pixels"), 2**70, NONE),
    ("images", ("stats", "split"), 7, ALL),
    ("images", ("background",), "white", NONE),
    ("jpeg", ("jpeg",), [90], NONE),
    ("jpeg", ("jpeg", "quality"), "best", NONE),
    ("images", ("inputs",), DEEP, NONE),
    # tokens: vocab_size, eot_id, tokenizer, splits
    ("tokens", ("vocab_size",), "57", ALL),
    ("tokens", ("vocab_size",), 0, ALL),
    ("tokens", ("vocab_size",), 2**64, NONE),
    ("tokens", ("eot_id",), 10**6, ALL),
    ("tokens", ("tokenizer",), ["chars.json"], ALL),
    ("tokens", ("tokenizer", "file"), "../outside/chars.json", NONE),
    ("tokens", ("tokenizer", "file"), "OUTSIDE/chars.json", NONE),
    ("tokens", ("tokenizer", "file"), 42, ALL),
    ("tokens", ("tokenizer", "sha256"), "../../../../a", ALL),
    ("tokens", ("tokenizer", "name"), {"a": 1}, NONE),
    ("tokens", ("splits",), ["train"], ALL),
    ("tokens", ("splits", "train"), "all", ALL),
    ("tokens", ("splits", "train", "docs"), "many", NONE),
    # table: columns, arrays, splits, target
    ("table", ("columns", 0), "city", ALL),
    ("table", ("columns", 0, "vocab"), [1, 2, 3], ALL),
    ("table", ("columns", 0, "counts"), "many", NONE),
    ("table", ("columns", 1, "mean"), "high", ALL),
    ("table", ("columns", 1, "role"), GONE, ALL),
    ("table", ("arrays", "cat_0"), "nowhere", ALL),
    ("table", ("arrays", "num_9"), "price", ALL),
    ("table", ("splits",), [20, 0], ALL),
    ("table", ("splits", "train"), "20", ALL),
    ("table", ("target",), ["label"], NONE),
    # volumes: volumes (pad, affine, path...), targets, orient
    ("volumes", ("volumes",), [], ALL),
    ("volumes", ("volumes", 0, "pad"), GONE, ALL),
    ("volumes", ("volumes", 0, "affine"), "eye", NONE),
    ("volumes", ("volumes", 0, "spacing"), [0, -1, 1e308], NONE),
    ("volumes", ("volumes", 0, "shape"), [2**40, 1, 1], NONE),
    ("volumes", ("volumes", 0, "path"), "../../outside/secret.nii.gz", NONE),
    ("volumes", ("targets",), "grade", ALL),
    ("volumes", ("targets", 0, "array"), "volume_target_9", ALL),
    ("volumes", ("targets", 0, "classes"), [1, 2], ALL),
    ("volumes", ("orient",), 3, NONE),
    # samples: fields (each kind's entries), the stats of an image field
    ("samples", ("fields",), ["img"], ALL),
    ("samples", ("fields", "img", "kind"), "hologram", ALL),
    ("samples", ("fields", "img", "sizes"), "16", ALL),
    ("samples", ("fields", "kimg", "mode"), "warp", ALL),
    ("samples", ("fields", "boxes", "image"), "nothing", ALL),
    ("samples", ("fields", "inst", "mode"), "fill", ALL),
    ("samples", ("fields", "points", "joints"), -3, ALL),
    ("samples", ("fields", "y", "classes"), [1, 2], NONE),
    ("samples", ("fields", "y", "classes"), ["cat"], READ),
    ("samples", ("fields", "rows", "shape"), [None, "2"], ALL),
    ("samples", ("fields", "vec", "dtype"), "object", ALL),
    ("samples", ("fields", "tok", "vocab_size"), 2, NONE),
    ("samples", ("fields", "tok", "tokenizer"), "../outside/tok.tokenizer.json", NONE),
    ("samples", ("fields", "tok", "tokenizer"), "OUTSIDE/tok.tokenizer.json", NONE),
    ("samples", ("stats", "img"), "bright", ALL),
    ("samples", ("stats", "jimg", "sizes", "16", "mean"), [1e400], ALL),
    # audio and video
    ("audio", ("audio",), [16000], ALL),
    ("audio", ("audio", "channels"), 10**9, ALL),
    ("audio", ("audio", "seconds"), -1, ALL),
    ("audio", ("audio", "dtype"), "float64", ALL),
    ("audio", ("audio", "max_seconds"), "long", ALL),
    ("clips", ("video",), "mp4", ALL),
    ("clips", ("video", "fps"), 0, ALL),
    ("clips", ("video", "size"), "16", ALL),
    ("clips", ("video", "mode"), "zoom", ALL),
    ("clips", ("video", "frames"), -1, ALL),
    ("clips", ("fields", "frames", "size"), 2**31, ALL),
    # what the importers record
    ("coco", ("coco",), "instances", NONE),
    ("coco", ("coco", "categories"), "all", NONE),
    ("coco", ("coco", "categories", 0, "name"), DEEP, NONE),
    ("pairs", ("pairs", "source"), "../outside/captions.csv", NONE),
    ("hf", ("hf", "features"), ["image"], NONE),
    ("hf", ("hf", "layout"), 7, NONE),
    ("hf", ("hf", "columns"), DEEP, NONE),
    ("hf", ("splits",), ["train"], NONE),
    ("hf", ("splits", "train"), -9, NONE),
    ("wds", ("webdataset", "shards"), "OUTSIDE/shard.tar", NONE),
    ("wds", ("webdataset",), [1], NONE),
    ("wds", ("webdataset", "fields"), "jpg", NONE),
]


def lie(path: tuple[Any, ...], value: Any) -> Callable[[Path, Path], None]:
    """extra[path] = value; a value naming OUTSIDE/NAME or ../outside/NAME: a file the case's
    `outside` folder holds (a copy of the dataset's NAME when it has one), which nothing may
    open."""

    def apply(root: Path, outside: Path) -> None:
        said = value
        if isinstance(value, str) and "outside/" in value.lower():
            name = value.rpartition("/")[2]
            copied = root / name
            (outside / name).write_bytes(copied.read_bytes() if copied.is_file() else b"{}")
            said = value.replace("OUTSIDE", str(outside))

        def change(m: Manifest) -> None:
            at = m["extra"]
            for key in path[:-1]:
                at = at[key]
            if value is GONE:
                del at[path[-1]]
            else:
                at[path[-1]] = said

        edit_manifest(root, change)

    return apply


def _shown(value: Any) -> str:
    if value is GONE:
        return "removed"
    return "nested 900 deep" if value is DEEP else f"{value!r:.30}"


EXTRA_CASES = [
    Case(
        f"extra.{'.'.join(map(str, path))} {_shown(value)} ({base})",
        base,
        lie(path, value),
        refuse,
        f"extra|{path[-1]}" if refuse else "",
    )
    for base, path, value, refuse in LIES
]
