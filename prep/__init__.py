"""prep: pack raw images, text, volumes, tables and samples of any shape once, offline, into
uint8 shards that `loaders` memory-maps."""

from prep.run.errors import PrepError, Reject, UsageError
from prep.run.version import __version__

__all__ = ["PrepError", "Reject", "UsageError", "__version__", "pack_samples"]


def __getattr__(name: str) -> object:
    # pack_samples imports the run engine: only when asked for, so `prep --help` stays fast.
    if name == "pack_samples":
        from prep.kinds.samples.pack import pack_samples

        return pack_samples
    raise AttributeError(f"module 'prep' has no attribute {name!r}")
