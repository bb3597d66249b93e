"""Hostile cases of the shard index of format version 4 (loaders/format/schema.py): `shards.npy`
(a column a shard: count, split, task, each array's length, each file's byte size) and
`sha256.npy` (each file's digest) beside the manifest, whose `index` entry gives their byte
sizes and digests. Each case rewrites an index file with that entry recomputed (only the
content lies), or swaps the file for a link or a FIFO, or edits the entry itself."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hostile_base import ALL, READ, VERIFY, Case, Manifest, edit_as_written, reindex

from loaders.format.index import DIGESTS, SHARDS, columns, parts
from loaders.format.spec import array_spec

Change = Callable[[Path, Path], None]
Table = Callable[[np.ndarray, list[str]], np.ndarray]


def table(change: Table, num_samples: int | None = None) -> Change:
    """shards.npy holds `change(table, columns)` (the table a copy: int64 (columns, shards)),
    and the manifest `num_samples` where given."""

    def apply(root: Path, outside: Path) -> None:
        columns: list[str] = []

        def edit(m: Manifest) -> None:
            columns.extend(m["index"]["columns"])
            if num_samples is not None:
                m["num_samples"] = num_samples

        edit_as_written(root, edit)
        reindex(root, SHARDS, change(np.load(root / SHARDS).copy(), columns))

    return apply


def _row(column: str, shard: int, value: int) -> Table:
    def change(t: np.ndarray, columns: list[str]) -> np.ndarray:
        t[columns.index(column), shard] = value
        return t

    return change


def _task_of_another(t: np.ndarray, columns: list[str]) -> np.ndarray:
    """Shard 1's row is shard 0's (its task too): shard 0's files, each listed twice."""
    t[:, 1] = t[:, 0]
    return t


def _wrapping(t: np.ndarray, columns: list[str]) -> np.ndarray:
    """Three shards of 2**62 samples: their sum wraps int64 to -2**62 (num_samples says so)."""
    t[columns.index("count")] = 2**62
    return t


def _digest(root: Path, outside: Path) -> None:
    sha = np.load(root / DIGESTS).copy()
    sha[0, 0, :4] ^= 0x5A  # shard 0's first file (the first array by name: colour-00000.npy)
    reindex(root, DIGESTS, sha)


def _saved(name: str, data: Callable[[np.ndarray], np.ndarray], **kw: Any) -> Change:
    def apply(root: Path, outside: Path) -> None:
        reindex(root, name, data(np.load(root / name)), **kw)

    return apply


def _header(old: bytes, new: bytes) -> Change:
    """shards.npy's header text with `old` replaced by `new`, its padding as much shorter (the
    header stays 128 bytes)."""

    def apply(root: Path, outside: Path) -> None:
        data = (root / SHARDS).read_bytes()
        rows = f"({np.load(root / SHARDS).shape[0]}, ".encode()  # the table's first dimension
        head = data[:127].replace(old.replace(b"(ROWS, ", rows), new)[:127].ljust(127)
        assert head != data[:127], f"{old!r} is not in shards.npy's header"
        reindex(root, SHARDS, head + data[127:])

    return apply


def _link_out(root: Path, outside: Path) -> None:
    shutil.copy(root / SHARDS, outside / SHARDS)
    (root / SHARDS).unlink()
    (root / SHARDS).symlink_to(outside / SHARDS)


def _fifo(root: Path, outside: Path) -> None:
    (root / SHARDS).unlink()
    os.mkfifo(root / SHARDS)


def entry(change: Callable[[dict[str, Any]], None]) -> Change:
    def apply(root: Path, outside: Path) -> None:
        def edit(m: Manifest) -> None:
            change(m["index"])

        edit_as_written(root, edit)

    return apply


def _sha_path(e: dict[str, Any]) -> None:
    e["files"][SHARDS]["sha256"] = "../../../../some/where/shards.npy"


def _renamed(old: str, new: str) -> Change:
    """Field `old` of one raw array renamed `new` in the manifest and in the index's columns
    and parts, from which a reader derives its file names: ../vec makes them ../vec-00000.npy,
    which the case puts there, beside the dataset."""

    def apply(root: Path, outside: Path) -> None:
        def made(arrays: dict[str, Any], storage: str) -> tuple[list[str], list[str]]:
            specs = {k: array_spec(k, v) for k, v in arrays.items()}
            return columns(specs, storage), parts(specs, storage)

        def edit(m: Manifest) -> None:
            was.extend(made(m["arrays"], m["storage"]))
            m["fields"][new] = m["fields"].pop(old)
            m["arrays"][new] = m["arrays"].pop(old) | {"field": new}
            now.extend(made(m["arrays"], m["storage"]))
            m["index"]["columns"] = now[0]

        was: list[list[str]] = []
        now: list[list[str]] = []
        edit_as_written(root, edit)
        for name, axis, (before, after) in (
            (SHARDS, 0, (was[0], now[0])),
            (DIGESTS, 1, (was[1], now[1])),
        ):
            order = [before.index(c.replace(new, old)) for c in after]
            reindex(root, name, np.take(np.load(root / name), order, axis=axis))
        for path in root.glob(f"{old}-*.npy"):
            shutil.copy(path, root / path.name.replace(old, new))

    return apply


INDEX = f"{SHARDS}|index"
INDEX_CASES = [
    Case("shards.npy a link out", "images", _link_out, ALL, SHARDS, url=False),
    Case("shards.npy a FIFO", "images", _fifo, ALL, SHARDS, url=False),
    Case("shards.npy transposed", "images", _saved(SHARDS, lambda t: t.T.copy()), ALL, SHARDS),
    # numpy's parse of the header raised TokenError (a parenthesis never closed), OverflowError
    Case("shards.npy header unclosed", "images", _header(b"), }", b", } "), ALL, SHARDS),
    Case(
        "shards.npy header of 10**20 rows",
        "images",
        _header(b"(ROWS, ", b"(10" + b"0" * 20 + b", "),
        ALL,
        SHARDS,
    ),
    Case("shards.npy float", "images", _saved(SHARDS, lambda t: t * 1.0), ALL, SHARDS),
    Case(
        "shards.npy pickled",
        "images",
        _saved(SHARDS, lambda t: t.astype(object), allow_pickle=True),
        ALL,
        SHARDS,
    ),
    Case("sha256.npy a shard short", "images", _saved(DIGESTS, lambda s: s[:2]), ALL, DIGESTS),
    Case("a digest in sha256.npy lies", "images", _digest, frozenset((VERIFY,)), "colour-00000"),
    Case(
        "a count in shards.npy lies",
        "images",
        table(_row("count", 0, 5), 13),
        READ,
        "shard 0|00000",
    ),
    Case("counts in shards.npy wrap", "images", table(_wrapping, -(2**62)), ALL, "count"),
    Case("a split code past the splits", "tokens", table(_row("split", 0, 3)), ALL, INDEX),
    Case("a negative task", "images", table(_row("task", 2, -1)), ALL, INDEX),
    Case("a task of 10**15", "images", table(_row("task", 2, 10**15)), READ, "0" * 15),
    Case("two shards of one task", "images", table(_task_of_another), ALL, INDEX + "|task"),
    Case(
        "an array length in shards.npy lies",
        "images",
        table(_row("length:label", 0, 40)),
        READ,
        "label-00000.npy",
    ),
    Case(
        "a byte size in shards.npy lies",
        "jpeg",
        table(_row("bytes:image_32", 1, 99)),
        READ,
        "image_32-00001.npy",
    ),
    Case("index entry shards 2**62", "images", entry(lambda e: e.update(shards=2**62)), ALL, INDEX),
    Case(
        "index entry columns reordered",
        "images",
        entry(lambda e: e["columns"].reverse()),
        ALL,
        INDEX,
    ),
    Case("index entry sha256 a path", "images", entry(_sha_path), ALL, "sha256"),
    Case("a field named ../vec", "samples", _renamed("vec", "../vec"), ALL, r"\.\./vec"),
]
