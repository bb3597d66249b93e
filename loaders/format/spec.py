"""The leaf of the format: the error every check raises, and one array's declaration (its
field, size, dtype, per-sample shape, codec and field kind), with the names both sides use.
Imports nothing of loaders: the field registry and the manifest's schema both build on it."""

from __future__ import annotations

import re
from dataclasses import dataclass

CODECS = ("raw", "ragged", "jpeg")
OFFSETS = ".offsets"  # Manifest.ref(shard, "image_256.offsets"): a ragged array's offsets
SHA256 = re.compile(r"[0-9a-f]{64}")  # a file's digest, lowercase hex (a cache's file name)


class FormatError(ValueError):
    """The dataset folder does not match its manifest, or the manifest is not one we read."""


@dataclass(frozen=True)
class ArraySpec:
    """One array of the dataset: `field` at `size` px (None for size-free fields like labels).

    `shape` is the shape of one sample (one token for token arrays); the array on disk is
    (length, *shape)."""

    field: str
    size: int | None
    dtype: str
    shape: tuple[int, ...]  # mode keep: the largest; each sample's (h, w) is in hw_{size}
    codec: str = "raw"
    # Version 3: the field kind of loaders.format.kinds.FIELDS when `field` is a name of the user's
    # (a samples dataset's "boxes" is an "array"); None: `field` is the kind.
    kind: str | None = None

    @property
    def ragged(self) -> bool:
        """Stored as flat data plus offsets (one sample a byte range), not (length, *shape)."""
        return self.codec != "raw"


def array_name(field_name: str, size: int | None) -> str:
    """`image_256` for a sized field, `label` for a size-free one."""
    return field_name if size is None else f"{field_name}_{size}"


def is_sha256(value: object) -> bool:
    """Whether `value` is a sha256 digest as prep writes it: 64 lowercase hex characters (a
    remote cache names its files by it: never a path)."""
    return isinstance(value, str) and SHA256.fullmatch(value) is not None
