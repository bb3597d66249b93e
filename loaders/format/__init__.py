"""The on-disk contract between `prep` (writer) and `loaders` (reader). See FORMAT.md.

A packed dataset is a folder. `manifest.json` is written last, atomically; a folder without it is
an unfinished run. The manifest lists every array (its field, size, dtype and per-sample shape)
and every shard (its sample count, the file and first-axis length of each array, and the byte
size and sha256 of each file). Arrays are `.npy` files (one per array and shard) or datasets in
one contiguous, uncompressed `.h5` file per shard; either way they are read as memory maps.

`schema` holds the manifest's types and their checks, `arrays` the reading of the files.
"""

from loaders.format.arrays import (
    check_array,
    iter_rejects,
    map_array,
    map_layout,
    open_array,
    read_manifest,
    read_manifest_file,
    safe_path,
    sha256_file,
)
from loaders.format.checks import check_files, load_manifest, problems_error
from loaders.format.schema import (
    CODECS,
    FORMAT_NAME,
    FORMAT_VERSION,
    KINDS,
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

__all__ = [
    "CODECS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "KINDS",
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
    "array_name",
    "check_array",
    "check_files",
    "iter_rejects",
    "load_manifest",
    "map_array",
    "map_layout",
    "open_array",
    "problems_error",
    "read_manifest",
    "read_manifest_file",
    "safe_path",
    "sha256_file",
]
