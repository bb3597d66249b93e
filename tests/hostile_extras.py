"""Hostile cases of every `extra` entry prep writes and of every field declaration that held one
in format version 3 (FORMAT.md; issue 34): each replaced by a value of another type or range,
or removed, in the manifest of the base that has it. What the readers, `prep info` and the
report read from `extra` and `fields` must be checked before it is used (one FormatError line)
or shown as it is; never a traceback, never a file it names opened. Version 3's counted totals
(a token dataset's and a table's extra.splits, extra.audio.seconds, extra.video.frames and
seconds) are gone from version 4, and their cases with them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostile_base import ALL, NONE, READ, Case, Manifest, edit_manifest

GONE = object()  # the entry removed
DEEP: Any = []
for _ in range(900):  # as deep as json.dumps goes: deeper than a recursive walk of it
    DEEP = [DEEP]

# (base, where: "extra", "fields" or another key of the manifest, then the path in it, value,
# the readers that must refuse it, naming the entry)
LIES: list[tuple[str, tuple[Any, ...], Any, frozenset[str]]] = [
    # images: stats (per image field, per size), background, inputs; the image field
    ("images", ("extra", "stats"), [1, 2], ALL),
    ("images", ("extra", "stats", "image", "sizes", "32", "mean"), "grey", ALL),
    ("images", ("extra", "stats", "image", "sizes", "32", "std"), [-1, 0, 0], ALL),
    ("keep", ("extra", "stats", "image", "sizes", "32", "pixels"), 2**70, NONE),
    ("images", ("extra", "stats", "image", "split"), 7, ALL),
    ("images", ("extra", "background"), "white", NONE),
    ("jpeg", ("fields", "image"), [90], ALL),  # version 3's extra.jpeg
    ("jpeg", ("fields", "image", "quality"), "best", ALL),
    ("images", ("extra", "inputs"), DEEP, NONE),
    # tokens: the tokens field (version 3's extra.vocab_size, eot_id, tokenizer)
    ("tokens", ("fields", "tokens", "vocab_size"), "57", ALL),
    ("tokens", ("fields", "tokens", "vocab_size"), 0, ALL),
    ("tokens", ("fields", "tokens", "vocab_size"), 2**64, ALL),
    ("tokens", ("fields", "tokens", "vocab_size"), 2**32, NONE),  # ids of uint32: allowed
    ("tokens", ("fields", "tokens", "eot_id"), 10**6, ALL),
    ("tokens", ("fields", "tokens", "tokenizer"), ["chars.json"], ALL),
    ("tokens", ("fields", "tokens", "tokenizer"), "../outside/chars.json", NONE),
    ("tokens", ("fields", "tokens", "tokenizer"), "OUTSIDE/chars.json", NONE),
    ("tokens", ("fields", "tokens", "tokenizer"), 42, ALL),
    ("tokens", ("fields", "tokens", "tokenizer_sha256"), "../../../../a", ALL),
    ("tokens", ("fields", "tokens", "tokenizer_name"), {"a": 1}, NONE),
    # table: its column fields (version 3's extra.columns and extra.arrays), extra.target
    ("table", ("fields", "cat_0"), "city", ALL),
    ("table", ("fields", "cat_0", "vocab"), [1, 2, 3], ALL),
    ("table", ("fields", "cat_0", "counts"), "many", NONE),
    ("table", ("fields", "num_0", "mean"), "high", ALL),
    ("table", ("fields", "num_0", "role"), "weight", ALL),  # version 4: no role is num
    ("table", ("arrays", "cat_0", "field"), "nowhere", ALL),
    ("table", ("fields", "num_9"), {"kind": "column", "name": "price"}, ALL),
    ("table", ("extra", "target"), ["label"], NONE),
    # volumes: extra.volumes (pad, affine, path...); the image field's orient, the targets
    ("volumes", ("extra", "volumes"), [], ALL),
    ("volumes", ("extra", "volumes", 0, "pad"), GONE, ALL),
    ("volumes", ("extra", "volumes", 0, "affine"), "eye", NONE),
    ("volumes", ("extra", "volumes", 0, "spacing"), [0, -1, 1e308], NONE),
    ("volumes", ("extra", "volumes", 0, "shape"), [2**40, 1, 1], NONE),
    ("volumes", ("extra", "volumes", 0, "path"), "../../outside/secret.nii.gz", NONE),
    ("volumes", ("fields", "volume_target_0"), "grade", ALL),
    ("volumes", ("fields", "volume_target_9"), {"kind": "column", "role": "target"}, ALL),
    ("volumes", ("fields", "volume_target_0", "vocab"), [1, 2], ALL),
    ("volumes", ("fields", "image", "orient"), 3, ALL),
    # samples: fields (each kind's entries), the stats of an image field
    ("samples", ("fields",), ["img"], ALL),
    ("samples", ("fields", "img", "kind"), "hologram", ALL),
    ("samples", ("fields", "img", "sizes"), "16", ALL),
    ("samples", ("fields", "img", "sizes"), [float("inf")], ALL),
    ("samples", ("fields", "kimg", "mode"), "warp", ALL),
    ("samples", ("fields", "boxes", "image"), "nothing", ALL),
    ("samples", ("fields", "inst", "mode"), "fill", ALL),
    ("samples", ("fields", "points", "joints"), -3, ALL),
    ("samples", ("fields", "y", "classes"), [1, 2], ALL),
    ("samples", ("fields", "y", "classes"), ["cat"], READ),
    ("samples", ("fields", "rows", "shape"), [None, "2"], ALL),
    ("samples", ("fields", "vec", "dtype"), "object", ALL),
    ("samples", ("fields", "tok", "vocab_size"), 2, NONE),
    ("samples", ("fields", "tok", "tokenizer"), "../outside/tok.tokenizer.json", NONE),
    ("samples", ("fields", "tok", "tokenizer"), "OUTSIDE/tok.tokenizer.json", NONE),
    ("samples", ("extra", "stats", "img"), "bright", ALL),
    ("samples", ("extra", "stats", "jimg", "sizes", "16", "mean"), [1e400], ALL),
    # audio and video: their fields (version 3's extra.audio, extra.video)
    ("audio", ("fields", "audio"), [16000], ALL),
    ("audio", ("fields", "audio", "channels"), 10**9, ALL),
    ("audio", ("fields", "audio", "dtype"), "float64", ALL),
    ("audio", ("fields", "audio", "max_seconds"), "long", ALL),
    ("clips", ("fields", "frames"), "mp4", ALL),
    ("clips", ("fields", "frames", "fps"), 0, ALL),
    ("clips", ("fields", "frames", "size"), "16", ALL),
    ("clips", ("fields", "frames", "mode"), "zoom", ALL),
    ("clips", ("fields", "frames", "size"), 2**31, ALL),
    # what the importers record
    ("coco", ("extra", "coco"), "instances", NONE),
    ("coco", ("extra", "coco", "categories"), "all", NONE),
    ("coco", ("extra", "coco", "categories", 0, "name"), DEEP, NONE),
    ("pairs", ("extra", "pairs", "source"), "../outside/captions.csv", NONE),
    ("hf", ("extra", "hf", "features"), ["image"], NONE),
    ("hf", ("extra", "hf", "layout"), 7, NONE),
    ("hf", ("extra", "hf", "columns"), DEEP, NONE),
    ("hf", ("extra", "splits"), ["train"], NONE),
    ("hf", ("extra", "splits", "train"), -9, NONE),
    ("wds", ("extra", "webdataset", "shards"), "OUTSIDE/shard.tar", NONE),
    ("wds", ("extra", "webdataset"), [1], NONE),
    ("wds", ("extra", "webdataset", "fields"), "jpg", NONE),
]


def lie(path: tuple[Any, ...], value: Any) -> Callable[[Path, Path], None]:
    """manifest[path] = value; a value naming OUTSIDE/NAME or ../outside/NAME: a file the
    case's `outside` folder holds (a copy of the dataset's NAME when it has one), which nothing
    may open."""

    def apply(root: Path, outside: Path) -> None:
        said = value
        if isinstance(value, str) and "outside/" in value.lower():
            name = value.rpartition("/")[2]
            copied = root / name
            (outside / name).write_bytes(copied.read_bytes() if copied.is_file() else b"{}")
            said = value.replace("OUTSIDE", str(outside))

        def change(m: Manifest) -> None:
            at = m
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


def _names(path: tuple[Any, ...]) -> str:
    """What a refusal names: the field a declaration lies in, or the entry."""
    if path[0] == "fields" and len(path) > 1:
        return rf"\b{path[1]}(\b|_\d)"  # the field, or its array NAME_SIZE
    return f"{path[0]}|{path[-1]}"


EXTRA_CASES = [
    Case(
        f"{'.'.join(map(str, path))} {_shown(value)} ({base})",
        base,
        lie(path, value),
        refuse,
        _names(path) if refuse else "",
    )
    for base, path, value, refuse in LIES
]
