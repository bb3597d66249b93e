"""The `extra` of each kind's manifest of versions 1-3: what the datasets and `prep info` read from
it, checked when the manifest is read. A manifest that JSON accepts but prep did not write (`extra`
a list, a table without columns, a string for `eot_id`) is then one FormatError line at open, never
a KeyError or AttributeError where the value is used.

>>> check_extra({"kind": "tokens", "extra": {"vocab_size": 256, "eot_id": "0"}}, {}, 1)
Traceback (most recent call last):
...
loaders.format.spec.FormatError: extra.eot_id '0' is not null or an id below vocab_size 256
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeGuard

from loaders.format.spec import MAX_SIDE, VIDEO_MODES, ArraySpec, FormatError, is_sha256
from loaders.format.stats import check_stats

COLUMNS = ("num", "cat", "target", "missing")  # the fields of a table's columns
# extra.audio: what AudioDataset allocates its windows from (prep audio's --rate and --channels
# bounds; a rate of 1e12 asked for TiBs a batch)
MAX_RATE, MAX_CHANNELS = 384_000, 64
# The ids a token dtype holds (FORMAT.md: the narrowest holding 0 .. vocab_size - 1): a
# vocab_size beyond its array's is a lie (2**64 overflowed the report's bincount).
IDS = {"uint8": 2**8, "uint16": 2**16, "uint32": 2**32}
AXES = ("LR", "AP", "IS")  # extra.orient: a letter of each pair, as prep volumes --orient


def _int(value: object, low: int = 0) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _seconds(value: object) -> TypeGuard[int | float]:
    return _number(value) and math.isfinite(value) and value >= 0


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise FormatError(f"extra.{what}")


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise FormatError(f"extra.{what} {str(value)[:40]} is not a list")
    return value


def _dict(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FormatError(f"extra.{what} {str(value)[:40]} is not an object")
    return value


def _tokens(extra: dict[str, Any], arrays: dict[str, ArraySpec], count: int) -> None:
    vocab, eot = extra.get("vocab_size"), extra.get("eot_id", "missing")
    ids = IDS.get(arrays["tokens"].dtype, 2**32) if "tokens" in arrays else 2**32
    _need(_int(vocab, 1) and vocab <= ids, f"vocab_size {vocab!r:.40} is not 1..{ids}")
    ok = eot is None or (_int(eot) and eot < vocab)  # type: ignore[operator]  # vocab: an int
    _need(ok, f"eot_id {eot!r} is not null or an id below vocab_size {vocab}")
    tok = _dict(extra.get("tokenizer", {}), "tokenizer")
    file, sha = tok.get("file"), tok.get("sha256")
    _need(file is None or isinstance(file, str), f"tokenizer.file {file!r} is not a file name")
    _need(sha is None or is_sha256(sha), f"tokenizer.sha256 {str(sha)[:70]!r} is not a digest")
    splits = _dict(extra.get("splits", {}), "splits")
    _need(all(isinstance(s, dict) for s in splits.values()), "splits: a split is not an object")
    counts = [s.get(k, 0) for s in splits.values() for k in ("docs", "tokens", "shards")]
    _need(all(map(_int, counts)), "splits: a split's docs, tokens or shards is not a count")


def _column(c: object) -> str:
    """A table column's name, once its entry holds what TableDataset and `prep info` read."""
    c = _dict(c, "columns: a column")
    name = c.get("name")
    if not isinstance(name, str):
        raise FormatError(f"extra.columns: {c!r:.40} has no name")
    for key in ("role", "kind", "dtype"):
        _need(isinstance(c.get(key), str), f"columns: {name}'s {key} {c.get(key)!r} is not a name")
    _need(_int(c.get("missing")), f"columns: {name}'s missing count is not a count")
    _need("vocab" not in c or _strings(c["vocab"]), f"columns: {name}'s vocab is not a list")
    _need(_int(c.get("first_code", 0)), f"columns: {name}'s first_code is not a code")
    for key in ("mean", "std", "lo", "hi"):
        value = c.get(key)
        _need(
            value is None or _number(value), f"columns: {name}'s {key} {value!r:.40} is no number"
        )
    return name


def _table(extra: dict[str, Any], arrays: dict[str, ArraySpec], count: int) -> None:
    names = {_column(c) for c in _list(extra.get("columns"), "columns")}
    stored = _dict(extra.get("arrays"), "arrays")
    for array, column in stored.items():
        _need(array in arrays, f"arrays: {array!r:.40} is not an array of the manifest")
        _need(column in names, f"arrays: {array} holds {column!r:.40}, not one of the columns")
    unnamed = sorted(a for a, spec in arrays.items() if spec.field in COLUMNS and a not in stored)
    _need(not unnamed, f"arrays: {', '.join(unnamed)[:60]} name no column")
    splits = _dict(extra.get("splits"), "splits")
    _need(all(_int(n) for n in splits.values()), "splits: a split's row count is not a count")


def _volumes(extra: dict[str, Any], arrays: dict[str, ArraySpec], count: int) -> None:
    orient = extra.get("orient", "RAS")
    letters = orient.upper() if isinstance(orient, str) else ""
    pairs = sorted(next((p for p in AXES if c in p), "") for c in letters)
    _need(pairs == sorted(AXES), f"orient {orient!r:.40} is not 3 axis codes (RAS, LPS...)")
    meta = _list(extra.get("volumes"), "volumes")
    _need(len(meta) == count, f"volumes lists {len(meta)} volumes' metadata, not {count}")
    ok = all(isinstance(v, dict) and _number(v.get("pad")) for v in meta)
    _need(ok, "volumes: a volume's metadata has no pad value")
    for t in _list(extra.get("targets") or [], "targets"):
        t = _dict(t, "targets: a target")
        _need(t.get("array") in arrays, f"targets: {t!r:.40} names no array of the manifest")
        ok = t.get("classes") is None or _strings(t["classes"])
        _need(ok, f"targets: {t['array']}'s classes are not null or a list of names")


def _images(extra: dict[str, Any], arrays: dict[str, ArraySpec], count: int) -> None:
    if "stats" in extra:  # 1 or 3 channels: the arrays' headers are checked against theirs
        sizes = (s.size for s in arrays.values() if s.field == "image")
        check_stats(extra["stats"], "extra.stats", sizes, None)


def _audio(a: object, arrays: dict[str, ArraySpec]) -> None:
    """extra.audio (prep audio): the rate and channels AudioDataset windows by, those of the
    `audio` array (mono: one); the rest `prep info` shows."""
    a = _dict(a, "audio")
    rate, channels, spec = a.get("rate"), a.get("channels"), arrays.get("audio")
    _need(_int(rate, 1) and rate <= MAX_RATE, f"audio.rate {rate!r:.40} is not 1..{MAX_RATE} Hz")
    stored = (spec.shape or (1,))[0] if spec is not None else None
    ok = _int(channels, 1) and channels <= MAX_CHANNELS and channels == stored
    _need(ok, f"audio.channels {channels!r:.40} is not the {stored} of the audio array")
    _need(a.get("dtype") == spec.dtype, f"audio.dtype {a.get('dtype')!r:.40} is not the array's")  # type: ignore[union-attr]
    cut = a.get("max_seconds")
    _need(_seconds(a.get("seconds")), f"audio.seconds {a.get('seconds')!r:.40} is no duration")
    _need(cut is None or (_seconds(cut) and cut > 0), f"audio.max_seconds {cut!r:.40}")
    _need(isinstance(a.get("resampler", ""), str), "audio.resampler is not a name")


def _video(v: object) -> None:
    """extra.video (prep video): what `prep info` and the report show of it."""
    v = _dict(v, "video")
    fps, size, cut = v.get("fps"), v.get("size"), v.get("max_frames")
    _need(_seconds(fps) and 0 < fps <= 1000, f"video.fps {fps!r:.40} is not in (0, 1000]")
    _need(_int(size, 1) and size <= MAX_SIDE, f"video.size {size!r:.40} is not 1..{MAX_SIDE} px")
    _need(v.get("mode") in VIDEO_MODES, f"video.mode {v.get('mode')!r:.40} is not {VIDEO_MODES}")
    _need(v.get("codec") in ("raw", "jpeg"), f"video.codec {v.get('codec')!r:.40}")
    _need(_int(v.get("frames")), f"video.frames {v.get('frames')!r:.40} is not a count")
    _need(_seconds(v.get("seconds")), f"video.seconds {v.get('seconds')!r:.40} is no duration")
    _need(cut is None or _int(cut, 1), f"video.max_frames {cut!r:.40} is not null or a count")


def _samples(extra: dict[str, Any], arrays: dict[str, ArraySpec], count: int) -> None:
    """Version 3: extra.fields is checked as a version 4 manifest's fields are, once read."""
    if "audio" in extra:
        _audio(extra["audio"], arrays)
    if "video" in extra:
        _video(extra["video"])


EXTRAS: dict[str, Callable[[dict[str, Any], dict[str, ArraySpec], int], None]] = {
    "images": _images,
    "tokens": _tokens,
    "table": _table,
    "volumes": _volumes,
    "samples": _samples,
}


def check_extra(d: dict[str, Any], arrays: dict[str, ArraySpec], count: int) -> None:
    """Raise FormatError unless the manifest `d` (its JSON object, with `arrays` and `count`
    samples) has a `config` object and an `extra` holding what datasets of its kind read."""
    extra, config = d.get("extra", {}), d.get("config", {})
    if not isinstance(extra, dict) or not isinstance(config, dict):
        raise FormatError(f"extra {str(extra)[:40]} or config {str(config)[:40]} is no object")
    check = EXTRAS.get(d["kind"])
    if check is not None:
        check(extra, arrays, count)
