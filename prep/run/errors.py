"""The errors a user can fix: the CLI prints each as one line and exits non-zero."""

from __future__ import annotations


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
