"""The errors a user can fix: the CLI prints each as one line and exits non-zero."""

from __future__ import annotations


class PrepError(Exception):
    """Its message names the file at fault and ends with a HINT on how to fix it.

    Examples:
        >>> import prep
        >>> e = prep.PrepError("data/x.csv: no 'path' column. HINT: name the image column 'path'")
        >>> e.exit_code  # the CLI prints the message as one line and exits 1
        1
    """

    exit_code = 1


class UsageError(PrepError):
    """A bad option or config value: exit 2, as for an unknown option.

    Examples:
        >>> import prep
        >>> prep.UsageError("--sizes 0: sizes are at least 1").exit_code
        2
    """

    exit_code = 2


class Reject(Exception):
    """Raise it in a `pack_samples` function: the input becomes a line of rejects.jsonl with
    this message and `code` as its reason.

    Examples:
        >>> import prep
        >>> def make(row):  # a pack_samples function
        ...     if not row["labels"]:
        ...         raise prep.Reject("no objects in this image", code="no_objects")
        ...     return {"image": row["path"], "labels": row["labels"]}
    """

    def __init__(self, message: str, code: str = "rejected"):
        super().__init__(message)
        self.code = code


def write_error(e: OSError, what: str = "the output") -> PrepError:
    """A failed write (disk full, quota, permissions...) as one line naming the file."""
    return PrepError(
        f"cannot write {e.filename or what}: {e.strerror or e}. HINT: free space or fix "
        "permissions on that disk, then rerun the same command with --resume (finished shards "
        "are kept)"
    )
