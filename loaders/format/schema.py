"""The manifest (docs/format.md, "manifest.json"), written last, naming its shard index
(loaders.format.index); or inline shards (versions 1-3 through loaders.format.legacy, a
hand-written manifest)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from loaders.format.index import Resolve, ShardIndex, open_index
from loaders.format.legacy import upgrade
from loaders.format.spec import (  # re-exported: the contract's names, in one place
    OFFSETS,
    ArrayRef,
    ArraySpec,
    FormatError,
    Shard,
    array_name,
    array_spec,
    check_shard,
    count,
    is_sha256,
)

FORMAT_NAME = "prep"
FORMAT_VERSION = 4  # what prep writes
READ_VERSIONS = (1, 2, 3, 4)  # 1-3 through loaders.format.legacy
MANIFEST = "manifest.json"
# Which manifest.json a reader holds: (device, inode, size, mtime_ns) of a file; a URL's backend
# gives its size and ETag last. A changed stamp is a new version.
Stamp = tuple[int, int, int, int]
REJECTS = "rejects.jsonl"
# A fixed-size .npy header lets a writer stream samples first and fill in the count last,
# and puts the data of every .npy file at the same offset. 128 bytes holds any 4-D shape.
NPY_HEADER_BYTES = 128
STORAGES = ("npy", "h5")
# Earlier versions of a dataset that grew (prep --append): VERSIONS/SHA/ holds the manifest whose
# bytes have that sha256, and its shard index; their shards are the dataset's own files.
VERSIONS = "versions"


FLAT = {str, int, float, bool, type(None)}  # the types of a list indented() writes on one line


def indented(value: Any, depth: int = 0) -> str:
    """JSON as json.dumps(indent=1, sort_keys=True) writes it, but a list of no list or object
    on one line, by the C encoder (indent=1 takes the Python one, item by item: a 1M-row
    table's vocabularies in 10 ms against 26).

    >>> print(indented({"b": [1, 2], "a": {"c": None}, "d": [{"e": "x"}]}))
    {
     "a": {
      "c": null
     },
     "b": [1, 2],
     "d": [
      {
       "e": "x"
      }
     ]
    }
    """
    pad = " " * (depth + 1)
    if isinstance(value, dict) and value:
        keys = {k: k if isinstance(k, str) else json.dumps(k) for k in sorted(value)}  # json's
        items = (f"{pad}{json.dumps(n)}: {indented(value[k], depth + 1)}" for k, n in keys.items())
    elif isinstance(value, list | tuple) and not set(map(type, value)) <= FLAT:
        items = (pad + indented(v, depth + 1) for v in value)
    else:  # a number, text, null, an empty object or a flat list
        return json.dumps(value, separators=(", ", ": "))
    ends = "{}" if isinstance(value, dict) else "[]"
    return ends[0] + "\n" + ",\n".join(items) + "\n" + " " * depth + ends[1]


@dataclass
class Manifest:
    storage: str  # "npy" or "h5"
    arrays: dict[str, ArraySpec]
    shards: Sequence[Shard]  # a list, or the lazy rows of a shard index
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> declaration
    config: dict[str, Any] = field(default_factory=dict)
    rejects: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    tool_version: str = ""
    format_version: int = FORMAT_VERSION
    command: str = ""  # what wrote it: "pack", "tokenize", "import coco"...
    index: dict[str, Any] | None = None  # the shard index's entry, once its files are written
    parent: str | None = None  # the sha256 of the manifest.json this one grew from (--append)
    removed: list[int] = field(default_factory=list)  # tombstones: samples `prep remove` hid

    @property
    def num_samples(self) -> int:
        return int(self.counts().sum())

    def counts(self) -> np.ndarray:
        """Samples per shard, int64 (one column of the index: never a record a shard)."""
        if isinstance(self.shards, ShardIndex):
            return np.asarray(self.shards.counts)
        return np.array([s.count for s in self.shards], dtype=np.int64)

    @property
    def splits(self) -> list[str]:
        """The splits' names, in the order their shards first appear."""
        if isinstance(self.shards, ShardIndex):
            return self.shards.splits
        return list(dict.fromkeys(s.split for s in self.shards if s.split is not None))

    def split_of(self) -> np.ndarray:
        """Each shard's split, as an object array of names (None: no split)."""
        if isinstance(self.shards, ShardIndex):
            names = np.array([*self.shards.splits, None], dtype=object)
            return names[np.asarray(self.shards.split_codes)]
        return np.array([s.split for s in self.shards] + [None], dtype=object)[:-1]

    @property
    def classes(self) -> list[str] | None:
        """The class names of field `label`, else of the first label field, else of any field."""
        named = [d for d in self.fields.values() if isinstance(d.get("classes"), list)]
        named.sort(key=lambda d: (d is not self.fields.get("label"), d.get("kind") != "label"))
        return list(named[0]["classes"]) if named else None

    def to_json(self) -> str:
        # extra as it is, not through asdict (a deep copy: 0.4 s for a 1M-row table's)
        kept = ("format_version", "command", "storage", "fields", "config", "rejects", "extra")
        d: dict[str, Any] = {k: getattr(self, k) for k in kept}
        d |= {"format": FORMAT_NAME, "tool_version": self.tool_version, "splits": self.splits}
        d["num_samples"] = self.num_samples
        d["arrays"] = {n: s.stored() for n, s in self.arrays.items()}
        if self.parent is not None:  # only a dataset that grew: others keep their bytes
            d["parent"] = self.parent
        if self.removed:
            d["removed"] = self.removed
        if self.index is not None:
            d["index"] = self.index
        else:
            d["shards"] = [asdict(s) for s in self.shards]
        return indented(d) + "\n"

    @classmethod
    def from_json(cls, data: bytes, source: object, resolve: Resolve | None = None) -> Manifest:
        """The manifest in `data` (`source`'s bytes), not checked against its files."""
        try:
            d = json.loads(data.decode("utf-8"))
            if not isinstance(d, dict):
                raise TypeError(f"a JSON {type(d).__name__}, not an object")
            return cls.from_dict(d, resolve)
        except FormatError as e:
            raise FormatError(f"{source}: {e}") from e
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise FormatError(f"{source} is malformed ({e!r}). HINT: repack the dataset") from e
        except RecursionError as e:  # JSON nested thousands deep: no manifest of prep's
            raise FormatError(f"{source} is nested too deep. HINT: repack the dataset") from e

    @classmethod
    def from_dict(cls, d: dict[str, Any], resolve: Resolve | None = None) -> Manifest:
        if d.get("format") != FORMAT_NAME:
            raise FormatError("not a prep manifest (no 'format': 'prep')")
        version = d.get("format_version")
        if version not in READ_VERSIONS or isinstance(version, bool):
            raise FormatError(
                f"format version {version} is not one of {list(READ_VERSIONS)}. "
                "HINT: repack with this version of prep, or install the prep that wrote it."
            )
        extra, config = d.get("extra", {}), d.get("config", {})
        if not isinstance(extra, dict) or not isinstance(config, dict):
            raise FormatError(f"extra {str(extra)[:40]} or config {str(config)[:40]} is no object")
        if version < FORMAT_VERSION:
            d = upgrade(d)
        if d["storage"] not in STORAGES:
            raise FormatError(f"storage {d['storage']!r} is not one of {STORAGES}")
        arrays = {k: array_spec(k, v) for k, v in d["arrays"].items()}
        if not isinstance(d.get("fields"), dict):
            raise FormatError(f"fields {str(d.get('fields'))[:40]} is not an object")
        splits = d.get("splits", [])
        if not isinstance(splits, list) or not all(isinstance(s, str) and s for s in splits):
            raise FormatError(f"splits {str(splits)[:40]} is not a list of names")
        shards: Sequence[Shard]
        if "index" in d:
            shards = open_index(d["index"], arrays, d["storage"], splits, resolve)
        else:
            shards = [Shard.from_dict(s) for s in d["shards"]]
            for i, shard in enumerate(shards):
                check_shard(i, shard, arrays)
        parent = d.get("parent")
        if parent is not None and not is_sha256(parent):
            raise FormatError(f"parent {str(parent)[:40]!r} is not a sha256 of a manifest")
        removed = d.get("removed", [])
        if not isinstance(removed, list) or not all(count(r) for r in removed):
            raise FormatError(f"removed {str(removed)[:40]} is not a list of sample indices")
        kept = ("config", "rejects", "extra", "tool_version", "index", "parent", "removed")
        said: dict[str, Any] = {k: d[k] for k in kept if k in d}
        said |= {"format_version": version, "command": str(d.get("command", ""))}
        m = cls(d["storage"], arrays, shards, d["fields"], **said)
        counts = m.counts()  # their int64 sum is num_samples: it must not wrap
        big = len(counts) and int(counts.max()) > (2**63 - 1) // len(counts)
        if big and sum(counts.tolist()) >= 2**63:
            raise FormatError("its shards' counts add up to 2**63 samples or more")
        total = m.num_samples
        if m.removed and (m.removed != sorted(set(m.removed)) or m.removed[-1] >= total):
            raise FormatError(f"removed: its indices are not sorted, unique, below {total}")
        if d.get("num_samples", total) != total:
            raise FormatError(
                f"the manifest says {d['num_samples']} samples but its shards hold {total}"
            )
        return m

    def ref(self, shard: int, name: str) -> tuple[ArrayRef, ArraySpec]:
        """Where array `name` of shard `shard` is and what it holds (`NAME.offsets` too)."""
        if name.endswith(OFFSETS):
            name = name.removesuffix(OFFSETS)
            spec = self.arrays[name]
            off = self.shards[shard].arrays[name].offsets
            assert off is not None  # checked when the manifest was read
            return off, ArraySpec(spec.field, spec.size, "int64", ())
        return self.shards[shard].arrays[name], self.arrays[name]

    def array_for(self, field_name: str, size: int) -> str:
        """The array holding `field_name` at `size`: its sized one, or the size-free one."""
        sized = array_name(field_name, size)
        return sized if sized in self.arrays else field_name

    def sizes(self) -> list[int]:
        return sorted({a.size for a in self.arrays.values() if a.size is not None})
