"""What a run checks of OUT before it touches anything, and the lock that keeps runs apart.

- OUT may not hold what the run reads (SRC, a mask folder, a tokenizer file): replacing OUT
  would delete it.
- A non-empty OUT must be a prep dataset holding only what prep wrote: --overwrite replaces
  it whole, so a file of the user's in it would be lost. `prep report OUT` writes
  OUT/report.html: a file of the dataset's, replaced with it.
- One run at a time per OUT: a lock file `.OUT.prep-lock` beside OUT (flock), held from listing
  to the swap and removed at the end. A second run exits 1 naming the pid and host of the first.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from loaders.fields import declared
from loaders.format import MANIFEST, REJECTS, FormatError, read_manifest
from prep.run.errors import PrepError, UsageError
from prep.run.files import HOST
from prep.run.staging import OLD, RUN_DIR, staging_dir

REPORT = "report.html"  # prep report's page, by default inside the dataset it describes


def check_out(out: Path, sources: list[Path], overwrite: bool, resume: bool) -> None:
    """Refuse an OUT that would lose a user's file (see the module docstring)."""
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
    foreign = foreign_files(out)
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


def foreign_files(out: Path) -> list[str]:
    """The names in folder `out` that are not part of the prep dataset it holds (all of them
    when it holds none): what replacing it would delete."""
    names = sorted(os.listdir(out))
    try:
        if not (out / MANIFEST).is_file():  # a FIFO there would block the read
            return names
        m = read_manifest(out)
        files = [f for s in m.shards for f in s.files] + list((m.index or {}).get("files", {}))
        files += [f for name, field in declared(m).items() for f in field.files(name)]
    except (OSError, FormatError):
        return names  # not a manifest prep wrote
    ours = {MANIFEST, REJECTS, RUN_DIR, OLD} | {Path(f).parts[0] for f in files if f}
    page = out / REPORT
    if page.is_file() and not page.is_symlink():  # prep report's page; a folder is the user's
        ours.add(REPORT)
    return [n for n in names if n not in ours]


LOCK_TEXT = re.compile(rb"pid [0-9]+ on [^\n]*\n?")  # what `locked` writes in the lock


def lock_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.prep-lock")


def _open_lock(path: Path) -> int:
    """The lock file, opened without following a link (`ln -s victim .OUT.prep-lock` must not
    make the run truncate `victim`): a regular file of one link, empty or written by prep."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # OUT's folder may be new
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PrepError(
                f"the lock {path} is a symbolic link; refused (packing would write through it). "
                "HINT: remove it, then rerun"
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
            f"{path} is not a lock file prep wrote (a special file, a hard link, or a file with "
            "other content); refused. HINT: move it away, then rerun"
        )
    return fd


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold OUT's lock for the block, or fail at once naming the run that holds it."""
    path = lock_path(out)
    while True:
        fd = _open_lock(path)
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
