"""prep: pack raw images and text once, offline, into uint8 shards that `loaders` memory-maps."""

__version__ = "0.1.0"


class PrepError(Exception):
    """A problem the user can fix: the CLI prints it as one line and exits non-zero.

    Messages name the file at fault and end with a HINT on how to fix it."""

    exit_code = 1


class UsageError(PrepError):
    """A bad option or config value: the CLI prints it as one line and exits 2, as for an
    unknown option."""

    exit_code = 2


class Reject(Exception):
    """Raise it in a `pack_samples` function: the input becomes a reject with this message
    (and `code`, the reject's reason), recorded in rejects.jsonl."""

    def __init__(self, message: str, code: str = "rejected"):
        super().__init__(message)
        self.code = code


def __getattr__(name: str) -> object:
    # pack_samples imports the run engine: only when asked for, so `prep --help` stays fast.
    if name == "pack_samples":
        from prep.kinds.samples.pack import pack_samples

        return pack_samples
    raise AttributeError(f"module 'prep' has no attribute {name!r}")
