"""What every shard task shares: one error line for a failed write, and ending with its parent."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from prep.run.errors import PrepError

T = TypeVar("T")


def write_error(e: OSError, what: str = "the output") -> PrepError:
    """A failed write (disk full, quota, permissions, read-only file system) as one line naming
    the file."""
    return PrepError(
        f"cannot write {e.filename or what}: {e.strerror or e}. HINT: free space or fix "
        "permissions on that disk, then rerun the same command with --resume (finished shards "
        "are kept)"
    )


_watching: list[int] = []  # the parent pid this worker process watches, once started


def shard_task(write: Callable[..., T]) -> Callable[..., T]:
    """The task that runs shard writer `write`: it takes the writer's arguments, then `parent`,
    the pid of the command whose loky worker runs it (None elsewhere). A failed write is a
    write_error."""

    @functools.wraps(write)
    def task(*args: Any) -> T:
        *write_args, parent = args
        try:
            exit_with_parent(parent)
            return write(*write_args)
        except OSError as e:
            raise write_error(e) from e

    return task


def exit_with_parent(parent: int | None) -> None:
    """In a loky worker of `parent`: a thread ends this process once the parent has died
    (SIGKILL), so that no orphan writes beside the --resume run that follows. Its temp files
    stay behind for the next run to remove (cleanup_temps)."""
    if _watching or parent is None or parent == os.getpid():
        return
    _watching.append(parent)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, name="prep-exit-with-parent", daemon=True).start()
