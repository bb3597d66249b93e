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
