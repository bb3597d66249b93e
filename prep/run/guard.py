"""What keeps OUT safe (docs/untrusted.md, "What packing promises"): the checks before a run touches
anything, the lock `.OUT.prep-lock` beside OUT, and the swap of the finished run folder into
place (renameat2 RENAME_EXCHANGE, else via `OUT.partial/.prep-old`), `OUT/.prep-run/` removed
last so that the next run finishes a killed swap (`recover`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from loaders.format import MANIFEST, REJECTS, FormatError, read_manifest
from loaders.format.schema import VERSIONS
from prep.run.card import CARD, is_ours
from prep.run.errors import PrepError, UsageError, write_error
from prep.run.files import HOST, fsync_dir, sync_all
from prep.run.grow import STATE
from prep.run.staging import OLD, RUN_DIR, cleanup_temps, listed_files, remove, staging_dir

REPORT = "report.html"  # prep report's page, by default inside the dataset it describes


def check_out(out: Path, sources: list[Path], overwrite: bool, resume: bool) -> None:
    """Refuse an OUT that would lose a user's file."""
    if not out.name:
        raise UsageError(f"OUT {out} is not a folder prep can write. HINT: name a new folder")
    for src in sources:
        inner = src.resolve()
        for folder in (out, staging_dir(out)):
            outer = folder.resolve()
            if inner == outer or outer in inner.parents:
                raise PrepError(
                    f"OUT {out} holds {src}, which this run reads: replacing OUT would delete "
                    "it. HINT: write the dataset to a folder outside the inputs"
                )
    if out.exists() and not out.is_dir():
        raise PrepError(
            f"{out} already exists and is not an empty folder (a file). HINT: choose another OUT"
        )
    if not out.is_dir() or not any(out.iterdir()):
        return
    ours: set[str] = set()  # the names of the prep dataset OUT holds (none: not one prep wrote)
    with contextlib.suppress(OSError, FormatError):
        if (out / MANIFEST).is_file():  # a FIFO there would block the read
            m = read_manifest(out)
            files = listed_files(m)
            ours = {MANIFEST, REJECTS, RUN_DIR, OLD, VERSIONS, STATE}  # prep.run.grow's too
            ours |= {Path(f).parts[0] for f in files if f}
            if m.command == "tokenize":  # --pack's plans (loaders.packing.packing_name: not
                ours.add("packing")  # imported, it imports torch)
    if ours and is_ours(out / CARD):  # the dataset card prep wrote (user edits are kept)
        ours.add(CARD)
    page = out / REPORT
    if ours and page.is_file() and not page.is_symlink():  # prep report's; a folder is the user's
        ours.add(REPORT)
    foreign = [n for n in sorted(os.listdir(out)) if n not in ours]
    if foreign and ours:  # files only an older version lists (kept by compact) are prep's too
        foreign = [n for n in foreign if n not in kept_files(out)]
    if foreign:
        shown = ", ".join(foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        raise PrepError(
            f"{out} already exists and is not an empty folder, and it holds files prep did not "
            f"write ({shown}). HINT: choose an empty or new OUT; --overwrite replaces only a "
            "dataset prep wrote"
        )
    if not (overwrite or resume):
        raise PrepError(
            f"{out} already exists and is not an empty folder. HINT: pass --overwrite to replace "
            "it (the old dataset stays readable until the new one is complete)"
        )


def kept_files(out: Path) -> set[str]:
    """The names (first path parts) of the files the kept versions (`versions/SHA/`) list: an
    older version's shards, left for its readers by `prep compact` without --prune."""
    names: set[str] = set()
    versions = out / VERSIONS
    for kept in sorted(versions.iterdir()) if versions.is_dir() else []:
        with contextlib.suppress(OSError, FormatError):
            names |= {Path(f).parts[0] for f in listed_files(read_manifest(kept)) if f}
    return names


LOCK_TEXT = re.compile(rb"pid [0-9]+ on [^\n]*\n?")  # what `locked` writes in the lock


def lock_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.prep-lock")


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold OUT's lock for the block, or fail at once naming the run that holds it."""
    path = lock_path(out)
    while True:
        # opened without following a link (a link must not make the run truncate its target):
        # a regular file of one link, empty or written by prep
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # OUT's folder may be new
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(path, flags, 0o666)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise PrepError(
                    f"the lock {path} is a symbolic link; refused (packing would write through "
                    "it). HINT: remove it, then rerun"
                ) from None
            raise PrepError(
                f"cannot create the lock {path}: {e.strerror}. HINT: OUT's folder must be writable"
            ) from e
        st = os.fstat(fd)
        ours = stat.S_ISREG(st.st_mode) and st.st_nlink == 1
        if ours and st.st_size:  # a lock a run left behind says "pid N on HOST"
            ours = st.st_size < 300 and LOCK_TEXT.fullmatch(os.pread(fd, 300, 0)) is not None
        if not ours:
            os.close(fd)
            raise PrepError(
                f"{path} is not a lock file prep wrote (a special file, a hard link, or a file "
                "with other content); refused. HINT: move it away, then rerun"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise PrepError(
                f"{out} is being written by {holder}. HINT: wait for that run to end, or stop "
                "it (Ctrl-C), then rerun"
            ) from None
        try:  # the holder before us may have removed the file after we opened it: open again
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {HOST}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still holding it: a waiting opener sees another inode
        os.close(fd)


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
    """Swap the finished run folder `staging` into place, then remove the old dataset."""
    try:
        cleanup_temps(staging)  # e.g. left by a dask worker that died mid-shard
        synced(staging)
        if not out.exists():
            os.replace(staging, out)
        elif not _exchange(staging, out):
            os.replace(out, staging / OLD)  # the old dataset rides inside the new folder
            os.replace(staging, out)
        fsync_dir(out.parent)
        recover(out)
    except OSError as e:
        raise write_error(e, str(out)) from e


def synced(staging: Path) -> None:
    """The run folder durable before the swap: its files (those written without an fsync: the
    rejects, the index, the card) and their names, all fsynced at once (files.sync_all)."""
    with os.scandir(staging) as entries:
        files = [Path(e.path) for e in entries if e.is_file(follow_symlinks=False)]
    sync_all([*files, staging])


def recover(out: Path) -> None:
    """Finish the removals of a swap that happened (OUT holds `.prep-run/` beside a manifest)."""
    if not ((out / RUN_DIR).is_dir() and (out / MANIFEST).is_file()):
        return
    old = staging_dir(out)  # after an exchange: the old dataset (a manifest, no run folder)
    if old.is_dir() and (old / MANIFEST).is_file() and not (old / RUN_DIR).exists():
        remove(old)
    elif old.is_dir() and not any(old.iterdir()):  # OUT was an empty folder
        old.rmdir()
    if (out / OLD).exists():
        remove(out / OLD)
    remove(out / RUN_DIR)  # last: while it is there, the next run finishes this
