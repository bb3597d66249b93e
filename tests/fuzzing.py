"""The fuzzing of tests/test_fuzz.py: seeded byte mutations (`mutate`), JSON tree mutations
(`mutate_tree`) and the loop that runs a target on them for FUZZ_SECONDS (`fuzz`), stdlib only
(imported as `fuzzing`: tests/ is on sys.path)."""

from __future__ import annotations

import copy
import math
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaders.format import FormatError

SECONDS = float(os.environ.get("FUZZ_SECONDS", "0.5"))  # per target in make test; make fuzz: 300
SEED = int(os.environ.get("FUZZ_SEED", "0"))
LEAST = 60  # inputs a target gets however busy the machine: a run is inputs, not seconds

# Bytes and words that parsers trip on: numbers at the edges of their types, quotes, brackets.
TOKENS = [
    b"0",
    b"-1",
    b"255",
    b"65536",
    b"2147483648",
    b"4294967296",
    b"9223372036854775808",
    b"18446744073709551616",
    b"1e999",
    b"NaN",
    b"'",
    b'"',
    b"(",
    b")",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b":",
    b"\\",
    b"\x00",
    b"\xff",
    b"|O",
    b"<U8",
    b">u2",
    b"|V4",
    b"True",
    b"None",
    b"..",
    b"/",
]


def mutate(data: bytes, rng: random.Random, focus: int | None = None) -> bytes:
    """One to four random edits of `data`: flipped bits, random or special bytes, inserted
    words, cut or repeated ranges; `focus`: edit mostly within the first `focus` bytes."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        span = len(buf) if focus is None or rng.random() < 0.1 else min(focus, len(buf))
        pos = rng.randrange(span) if span else 0
        op = rng.randrange(7)
        if op == 0 and buf:
            buf[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[pos] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2:
            buf[pos:pos] = rng.choice(TOKENS)
        elif op == 3:
            word = rng.choice(TOKENS)
            buf[pos : pos + len(word)] = word
        elif op == 4:
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 5:
            del buf[pos:]  # a file cut short
        else:
            buf[pos:pos] = buf[pos : pos + rng.randint(1, 16)]
    return bytes(buf)


def fuzz(
    target: Callable[[bytes], None],
    make: Callable[[random.Random], bytes],
    where: Path,
    refusals: tuple[type[BaseException], ...] = (FormatError,),
) -> int:
    """Run `target` on inputs from `make` for SECONDS, and on LEAST at least; `refusals` are the
    only ways to refuse (FormatError for a reader; an importer's own). Returns the number of
    inputs tried."""
    rng = random.Random(SEED)
    deadline, tried = time.monotonic() + SECONDS, 0
    while time.monotonic() < deadline or tried < LEAST:
        data = make(rng)
        try:
            target(data)
        except refusals:
            pass
        except Exception as e:
            crash = where / "crash.bin"
            crash.write_bytes(data)
            raise AssertionError(
                f"input {tried} (FUZZ_SEED={SEED}, saved in {crash}) raised {e!r}: {data[:400]!r}"
            ) from e
        tried += 1
    return tried


ODD: list[Any] = [
    None,
    True,
    0,
    -1,
    1,
    2**31,
    2**63,
    2**64,
    1e308,
    -0.5,
    math.nan,
    math.inf,
    "",
    "x",
    "../x",
    "/etc/passwd",
    "a" * 64,
    [],
    {},
    [1],
    {"a": 1},
    [[[[[]]]]],
]


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in a JSON tree."""
    found = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            found += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _paths(v, (*path, i))
    return found


def mutate_tree(tree: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A copy of `tree` with one to three values replaced, removed or duplicated."""
    tree = copy.deepcopy(tree)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(tree)[1:]
        if not paths:  # every key deleted: nothing left to change
            break
        path = rng.choice(paths)
        parent = tree
        for key in path[:-1]:
            parent = parent[key]
        key, op = path[-1], rng.randrange(4)
        if op == 0 and isinstance(parent, dict):
            del parent[key]
        elif op == 1 and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif op == 2 and isinstance(parent[key], int | float) and not isinstance(parent[key], bool):
            parent[key] = rng.choice([parent[key] + 1, parent[key] - 1, -parent[key], 2**64])
        else:
            parent[key] = copy.deepcopy(rng.choice(ODD))
    return tree
