"""The swap of a finished run folder into place, and finishing a swap that a kill interrupted.

1. OUT.partial/ holds the new dataset, its manifest last, and `.prep-run/`.
2. Swap: OUT.partial and OUT exchanged in one step where the system can (renameat2
   RENAME_EXCHANGE: readers see the old dataset or the new one, never none); elsewhere the old
   OUT is moved to `OUT.partial/.prep-old`, then OUT.partial becomes OUT.
3. The old dataset goes (OUT.partial, or OUT/.prep-old), and `OUT/.prep-run/` last.

A kill after a swap leaves OUT complete with `.prep-run/` in it: the next run on OUT ends step 3
(`recover`). No step leaves a folder under another name."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from pathlib import Path

from loaders.format import MANIFEST
from prep.run.files import fsync_dir
from prep.run.staging import OLD, RUN_DIR, cleanup_temps, remove, staging_dir
from prep.run.tasks import write_error


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step; False where the system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not glibc >= 2.28
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV, errno.EPERM):
        return False  # e.g. a file system without exchange: fall back to two renames
    raise OSError(err, os.strerror(err), str(b))


def install(staging: Path, out: Path) -> None:
    """Steps 2 and 3."""
    try:
        cleanup_temps(staging)  # e.g. left by a dask worker that died mid-shard
        if not out.exists():
            os.replace(staging, out)
        elif not _exchange(staging, out):
            os.replace(out, staging / OLD)  # the old dataset rides inside the new folder
            os.replace(staging, out)
        fsync_dir(out.parent)
        recover(out)
    except OSError as e:
        raise write_error(e, str(out)) from e


def recover(out: Path) -> None:
    """Finish step 3 of a swap that happened (OUT holds `.prep-run/` beside a manifest)."""
    if not ((out / RUN_DIR).is_dir() and (out / MANIFEST).is_file()):
        return
    old = staging_dir(out)  # after an exchange: the old dataset (a manifest, no run folder)
    if old.is_dir() and (old / MANIFEST).is_file() and not (old / RUN_DIR).exists():
        remove(old)
    elif old.is_dir() and not any(old.iterdir()):  # OUT was an empty folder
        old.rmdir()
    if (out / OLD).exists():
        remove(out / OLD)
    shutil.rmtree(out / RUN_DIR)  # last: while it is there, the next run finishes this
