"""loaders.format.checks with the checks that need the fields: each field's `problems` on the
small arrays of a shard, its `limits` and `strings` in `prep verify`'s bounded pass."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import declared
from loaders.format import checks
from loaders.format.arrays import Layout, read_layout, read_manifest, safe_path
from loaders.format.schema import Manifest, Shard, array_name
from loaders.format.values import Arrays


def field_problems(manifest: Manifest, shard: Shard, arrays: Arrays) -> list[str]:
    """Each field's problems in one shard, reading only the arrays a check uses (offsets, labels,
    sides: never the pixels or text), each once. A field is checked once all of its arrays are
    in `arrays` (a URL's files arrive one by one)."""
    values = _Read(arrays)
    found = []
    for name, f in declared(manifest).items():
        mine = [array_name(s.field, s.size) for s in f.arrays(name)]
        if all(n in arrays for n in mine):  # each line names the field's first file
            found += [f"{arrays[mine[0]][0]}: {p}" for p in f.problems(name, values)]
    return found


def value_limits(manifest: Manifest) -> tuple[dict[str, tuple[int, str]], dict[str, bool]]:
    """Every field's value bounds and string arrays (Field.limits, Field.strings)."""
    limits: dict[str, tuple[int, str]] = {}
    strings: dict[str, bool] = {}
    for name, f in declared(manifest).items():
        limits |= f.limits(name)
        strings |= f.strings(name)
    return limits, strings


def check_files(root: Path, manifest: Manifest, **kw: Any) -> list[str]:
    """loaders.format.checks.check_files with the fields' checks."""
    return checks.check_files(root, manifest, fields=field_problems, limits=value_limits, **kw)


def check_one(root: Path, manifest: Manifest, shard: int, out: Arrays) -> list[str]:
    """check_files of one shard of the folder `root` (`out` gets its arrays' layouts)."""
    path_of = functools.partial(safe_path, Path(root))
    return checks.check_shard(manifest, shard, path_of, out=out, fields=field_problems)


def load_manifest(root: Any) -> Manifest:
    """A dataset folder's manifest, with its fields and every file checked (FormatError naming
    the first problems)."""
    manifest = read_manifest(root)
    declared(manifest)
    problems = check_files(Path(root), manifest)
    if problems:
        raise checks.problems_error(problems)
    return manifest


class _Read(Mapping[str, np.ndarray]):
    """A shard's arrays by name, each read whole the first time a check asks for it."""

    def __init__(self, layouts: dict[str, tuple[Path, Layout]]):
        self.layouts, self.read = layouts, dict[str, np.ndarray]()

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.read:
            self.read[name] = read_layout(*self.layouts[name])
        return self.read[name]

    def __contains__(self, name: object) -> bool:  # a look at the layouts: nothing is read
        return name in self.layouts

    def __iter__(self) -> Iterator[str]:
        return iter(self.layouts)

    def __len__(self) -> int:
        return len(self.layouts)
