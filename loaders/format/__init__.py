"""The on-disk contract between `prep` (writer) and `loaders` (reader): see docs/format.md, and each
module's docstring. The names below load when first asked for: the CLI starts without the readers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names of _MODULES, typed; at run time __getattr__ imports them
    from loaders.format.arrays import *  # noqa: F403
    from loaders.format.schema import *  # noqa: F403
    from loaders.format.spec import FileInfo, problems_error  # noqa: F401

_MODULES = {
    "arrays": "check_array iter_rejects local_resolver map_layout read_manifest "
    "read_manifest_file safe_path sha256_file",
    "schema": "FORMAT_VERSION MANIFEST NPY_HEADER_BYTES OFFSETS REJECTS STORAGES ArrayRef "
    "ArraySpec FormatError Manifest Shard array_name",
    "spec": "FileInfo problems_error",
}
_EXPORTS = {name: f"loaders.format.{m}" for m, names in _MODULES.items() for name in names.split()}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loaders.format' has no attribute {name!r}")
