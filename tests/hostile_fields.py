"""Hostile cases of the samples datasets (issue 34): every field kind of `prep samples`
(tests/hostile_base.py's `samples` base: 6 samples in 2 shards of 3), the tokenizer file a
tokens field keeps, `prep audio`'s and `prep video`'s datasets, and rejects.jsonl. Each lies
in its content, its checksums recomputed (tests/hostile.py has the families of issue 23)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
from hostile_base import (
    ALL,
    NONE,
    OPEN,
    READ,
    VERIFY,
    Case,
    Manifest,
    digest,
    edit,
    npy,
    rewrite,
)

Change = Callable[[Path, Path], None]
VALUES = frozenset((OPEN, VERIFY))  # what reads every value: the readers and verify
VERIFY_ONLY = frozenset((VERIFY,))  # token ids; text, read with errors="replace" (bit rot)


Arrays = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def ragged(name: str, change: Arrays) -> Change:
    """Shard 0's data and offsets of ragged array `name` changed by `change(data, offsets)`."""

    def apply(root: Path, outside: Path) -> None:
        data, off = change(npy(root, f"{name}-00000.npy"), npy(root, f"{name}-offsets-00000.npy"))
        rewrite(root, f"{name}-00000.npy", data, relength=True)
        rewrite(root, f"{name}-offsets-00000.npy", off)

    return apply


def values(name: str, value: object) -> Change:
    """Shard 0's array `name` (raw) holding `value` everywhere, its dtype kept."""

    def apply(root: Path, outside: Path) -> None:
        a = npy(root, f"{name}-00000.npy")
        rewrite(root, f"{name}-00000.npy", np.full_like(a, value))

    return apply


def replaced(name: str, data: np.ndarray, relength: bool = False) -> Change:
    def apply(root: Path, outside: Path) -> None:
        rewrite(root, f"{name}-00000.npy", data, relength)

    return apply


def sample(name: str, text: bytes) -> Change:
    """Sample 0 of text, bytes or JSON field `name` holds `text`."""

    def change(data: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        new = np.frombuffer(text, np.uint8)
        data = np.concatenate([new, data[off[1] :]])
        return data, np.concatenate([[0], off[1:] - off[1] + len(new)]).astype(np.int64)

    return ragged(name, change)


def _backwards(data: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    off[1], off[2] = off[2], off[1]
    return data, off


def _half_row(data: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    off[1:-1] += 1  # sample 0 ends inside a row of 2
    return data, off


def _byte_short(data: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    off[-1] -= 1  # the last sample's last mask a byte short (issue 34, item 18)
    return data[:-1], off


def _step(by: int) -> Arrays:
    def change(data: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        off[1] += by
        return data, off

    return change


def _tamper(name: str) -> Change:
    def apply(root: Path, outside: Path) -> None:
        path = root / f"{name}-00000.npy"
        data = bytearray(path.read_bytes())
        for k in range(200, len(data) - 40, 11):
            data[k] ^= 0x5A
        path.write_bytes(bytes(data))
        digest(root)

    return apply


def _link_out(rel: str, text: str) -> Change:
    """`rel` a link to a file of `outside` holding `text` (a file a reader must not follow)."""

    def apply(root: Path, outside: Path) -> None:
        (outside / "secret").write_text(text)
        (root / rel).unlink()
        (root / rel).symlink_to(outside / "secret")

    return apply


def _holding(rel: str, text: str) -> Change:
    def apply(root: Path, outside: Path) -> None:
        (root / rel).write_text(text)
        digest(root)

    return apply


def _fifo(rel: str) -> Change:
    def apply(root: Path, outside: Path) -> None:
        (root / rel).unlink()
        os.mkfifo(root / rel)

    return apply


def _audio(key: str, value: object) -> Change:
    def change(m: Manifest) -> None:
        m["fields"]["audio"][key] = value

    return edit(change)


def _no_field(m: Manifest) -> None:
    del m["fields"]["vec"]


def _quality_shape(m: Manifest) -> None:
    m["extra"]["quality"]["shape"]["size_q1"] = "small"


DEEP = b"[" * 100_000 + b"]" * 100_000
SIDES = "frame size|frames_hw"  # a video's frame sides: checked with its frames
FIELD_CASES = [
    # every field kind of a samples dataset
    Case(
        "fixed array of another shape",
        "samples",
        replaced("vec", np.zeros((3, 4), np.float32)),
        READ,
        "vec",
    ),
    Case("ragged rows cut in half", "samples", ragged("rows", _half_row), READ, "rows"),
    Case("a scalar file shorter", "samples", replaced("s", np.zeros(2), True), READ, "array s"),
    Case("labels beyond classes", "samples", values("y", 7), READ, "y"),
    Case(
        "token ids beyond the vocabulary",
        "samples",
        values("tok", 200),
        VERIFY_ONLY,
        "tok",
    ),
    Case("text not UTF-8", "samples", sample("t", b"\xff\xfe caption"), VERIFY_ONLY, "t"),
    Case("bytes offsets backwards", "samples", ragged("b", _backwards), READ, "b-offsets"),
    Case("JSON not JSON", "samples", sample("j", b"{nope"), VALUES, "j"),
    Case("JSON nested 100,000 deep", "samples", sample("j", DEEP), VALUES, "j"),
    Case("JSON a 5000-digit integer", "samples", sample("j", b"9" * 5000), VALUES, "j"),
    Case(
        "raw image of another size",
        "samples",
        replaced("img_16", np.zeros((3, 8, 8, 3), np.uint8)),
        READ,
        "img_16",
    ),
    Case("kept image side of 0 px", "samples", values("kimg_hw_16", 0), READ, "kimg_hw_16"),
    Case("kept image side past its size", "samples", values("kimg_hw_16", 17), READ, "kimg_hw_16"),
    Case("JPEG image tampered", "samples", _tamper("jimg_16"), frozenset((OPEN,)), "jimg"),
    Case("JPEG image sides lie", "samples", values("jimg_hw_16", 9), NONE, "jimg"),
    Case("mask not its image's shape", "samples", ragged("jmask_16", _step(3)), READ, "jmask"),
    Case("boxes NaN", "samples", values("boxes_16", np.nan), READ, "boxes"),
    Case("boxes past the image", "samples", values("boxes_16", 1000), READ, "boxes"),
    Case("keypoints not whole points", "samples", ragged("points_16", _step(5)), READ, "points"),
    Case("instances a byte short", "samples", ragged("inst_16", _byte_short), READ, "inst"),
    Case("a field the arrays lack", "samples", edit(_no_field), ALL, "vec"),
    Case(
        "tokenizer a link out",
        "samples",
        _link_out("tok.tokenizer.json", "{}"),
        NONE,
        "",
        url=False,
    ),
    Case(
        "a token dataset's tokenizer a link out",
        "tokens",
        _link_out("chars.json", '{"chars": "abc"}'),
        NONE,
        "",
        url=False,
    ),
    Case(
        "tokenizer not a tokenizer",
        "samples",
        _holding("tok.tokenizer.json", '{"chars": [1, 2]}'),
        NONE,
        "",
    ),
    Case(
        "tokenizer nested 100,000 deep",
        "samples",
        _holding("tok.tokenizer.json", DEEP.decode()),
        NONE,
        "",
    ),
    # prep pack's quality scores (issue 39): read as they are, judged by verify and prep issues
    Case("quality scores NaN", "images", values("quality", np.nan), VERIFY_ONLY, "quality"),
    Case("quality scores past 1", "images", values("quality", 7.0), VERIFY_ONLY, "quality"),
    Case(
        "quality scores of another length",
        "images",
        replaced("quality", np.zeros((4, 3), np.float32)),
        READ,
        "quality",
        url=False,  # at a URL a file is checked as it arrives: an image reader never fetches it
    ),
    Case("quality summary not numbers", "images", edit(_quality_shape), ALL, "quality"),
    # audio and video
    Case("audio rate 1e12", "audio", _audio("rate", 10**12), ALL, r"audio.*\brate"),
    Case("audio of 0 channels", "audio", _audio("channels", 0), ALL, r"audio.*\bchannels"),
    Case("audio rate a string", "audio", _audio("rate", "fast"), ALL, r"audio.*\brate"),
    Case("audio source not UTF-8", "audio", sample("source", b"\xff.wav"), VERIFY_ONLY, "source"),
    Case("audio clips offsets backwards", "audio", ragged("audio", _backwards), READ, "audio"),
    Case("video frames of 65535 px", "clips", values("frames_hw_16", 65535), READ, SIDES),
    Case("video JPEG frames tampered", "clips", _tamper("frames_16"), NONE, "frames"),
    Case(
        "video frame ends backwards",
        "clips-raw",
        ragged("frames_ends_16", _backwards),
        READ,
        "frames_ends",
    ),
    Case(
        "video frame ends past its bytes",
        "clips-raw",
        ragged("frames_16", _byte_short),
        READ,
        "frames",
    ),
    # rejects.jsonl: not in the manifest, read by prep report
    Case(
        "rejects.jsonl a link out",
        "samples",
        _link_out("rejects.jsonl", '{"path": "x"}\n'),
        NONE,
        "",
        url=False,
    ),
    Case(
        "rejects.jsonl not JSON lines",
        "samples",
        _holding("rejects.jsonl", '[1, 2]\n{"path": 3}\nnope\n' + DEEP.decode() + "\n"),
        NONE,
        "",
    ),
    Case("rejects.jsonl a FIFO", "images", _fifo("rejects.jsonl"), NONE, "", url=False),
]
