"""URLs: which strings name one, joining them like paths, and their fsspec file system."""

from __future__ import annotations

import os
import re
from typing import Any

from loaders.format import FormatError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/+(.*)$")


def url_of(root: object) -> str | None:
    """The URL `root` names, or None for a local path. A URL that went through `Path` (which
    folds `s3://b` into `s3:/b`) is mended."""
    m = _URL.match(os.fspath(root) if isinstance(root, os.PathLike) else str(root))
    if not m or len(m.group(1)) < 2:  # one letter: a Windows drive, not a scheme
        return None
    scheme, rest = m.group(1).lower(), m.group(2).rstrip("/")
    return f"file:///{rest}" if scheme == "file" else f"{scheme}://{rest}"


class Url(str):
    """A URL that joins like a Path: `Url('s3://b/ds') / 'manifest.json'`."""

    def __truediv__(self, name: str) -> Url:
        return Url(f"{self.rstrip('/')}/{name}")

    @property
    def name(self) -> str:
        return self.rstrip("/").rsplit("/", 1)[-1]


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> Any:
    """The fsspec file system of `url` (fsspec imported here, on first use)."""
    try:
        import fsspec
    except ImportError as e:
        raise FormatError(
            f"{url}: reading a URL needs fsspec. HINT: pip install fsspec (and s3fs for s3://, "
            "gcsfs for gs://, aiohttp for http://)"
        ) from e
    try:
        # No listings cache: a file replaced remotely (a repack) must not be read with the
        # size and ETag seen before; an instance of its own per backend and process.
        options = {"use_listings_cache": False, "skip_instance_cache": True}
        fs, _ = fsspec.core.url_to_fs(url, **(options | (storage_options or {})))
    except (ImportError, ValueError) as e:
        raise FormatError(
            f"{url}: no file system for it ({e}). HINT: pip install 'prep[s3]' for s3://"
        ) from e
    return fs
