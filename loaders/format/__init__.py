"""The on-disk contract between `prep` (writer) and `loaders` (reader). See FORMAT.md.

A packed dataset is a folder. `manifest.json` is written last, atomically; a folder without it is
an unfinished run. It declares the dataset's fields and the arrays they store; each shard's
record is a row of the shard index beside it (loaders.format.index). Arrays are `.npy` files
(one per array and shard) or datasets in one contiguous, uncompressed `.h5` file per shard;
either way they are read as memory maps. Versions 1-3 are read through loaders.format.legacy.

`spec` is the leaf (FormatError, ArraySpec, the shard records), `schema` holds the manifest and
its checks, `index` the shard index, `arrays` the reading of the files, `checks` the folder's
checks, `values` the bounded pass over values. The names below load when first asked for, so
that `loaders.format.spec` alone imports nothing else. The checks that need the fields are
loaders.fields.checks'.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loaders.format.arrays import (
        check_array,
        local_resolver,
        map_array,
        map_layout,
        open_array,
        read_manifest,
        read_manifest_file,
        safe_path,
        sha256_file,
    )
    from loaders.format.checks import (
        array_counts,
        check_files,
        problems_error,
    )
    from loaders.format.rejects import (
        iter_rejects,
    )
    from loaders.format.schema import (
        CODECS,
        FORMAT_NAME,
        FORMAT_VERSION,
        MANIFEST,
        NPY_HEADER_BYTES,
        OFFSETS,
        READ_VERSIONS,
        REJECTS,
        STORAGES,
        ArrayRef,
        ArraySpec,
        FileInfo,
        FormatError,
        Manifest,
        Shard,
        array_name,
    )

_EXPORTS = {
    "check_array": "loaders.format.arrays",
    "local_resolver": "loaders.format.arrays",
    "map_array": "loaders.format.arrays",
    "map_layout": "loaders.format.arrays",
    "open_array": "loaders.format.arrays",
    "read_manifest": "loaders.format.arrays",
    "read_manifest_file": "loaders.format.arrays",
    "safe_path": "loaders.format.arrays",
    "sha256_file": "loaders.format.arrays",
    "array_counts": "loaders.format.checks",
    "check_files": "loaders.format.checks",
    "problems_error": "loaders.format.checks",
    "iter_rejects": "loaders.format.rejects",
    "CODECS": "loaders.format.schema",
    "FORMAT_NAME": "loaders.format.schema",
    "FORMAT_VERSION": "loaders.format.schema",
    "MANIFEST": "loaders.format.schema",
    "NPY_HEADER_BYTES": "loaders.format.schema",
    "OFFSETS": "loaders.format.schema",
    "READ_VERSIONS": "loaders.format.schema",
    "REJECTS": "loaders.format.schema",
    "STORAGES": "loaders.format.schema",
    "ArrayRef": "loaders.format.schema",
    "ArraySpec": "loaders.format.schema",
    "FileInfo": "loaders.format.schema",
    "FormatError": "loaders.format.schema",
    "Manifest": "loaders.format.schema",
    "Shard": "loaders.format.schema",
    "array_name": "loaders.format.schema",
}

__all__ = [
    "CODECS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST",
    "NPY_HEADER_BYTES",
    "OFFSETS",
    "READ_VERSIONS",
    "REJECTS",
    "STORAGES",
    "ArrayRef",
    "ArraySpec",
    "FileInfo",
    "FormatError",
    "Manifest",
    "Shard",
    "array_counts",
    "array_name",
    "check_array",
    "check_files",
    "iter_rejects",
    "local_resolver",
    "map_array",
    "map_layout",
    "open_array",
    "problems_error",
    "read_manifest",
    "read_manifest_file",
    "safe_path",
    "sha256_file",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loaders.format' has no attribute {name!r}")
