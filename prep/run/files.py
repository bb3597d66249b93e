"""Writing files so that a reader sees all or nothing: temp names, fsync, atomic renames, and
.npy files streamed sample by sample."""

from __future__ import annotations

import contextlib
import os
import platform
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np

from loaders.format import NPY_HEADER_BYTES, FileInfo, sha256_file
from prep.run.profile import stage

HOST = platform.node()  # socket.gethostname()'s name, without importing socket (issue 40)

T = TypeVar("T")


def temp_path(final: Path) -> Path:
    """A temp name beside `final`, unique across processes and hosts: `.NAME.HOST-PID-RAND.tmp`.

    >>> temp_path(Path("d/a.npy")).name.startswith(".a.npy.")
    True
    """
    # os.urandom, as secrets.token_hex does (importing secrets: random, hmac, base64)
    return final.with_name(f".{final.name}.{HOST}-{os.getpid()}-{os.urandom(4).hex()}.tmp")


def named(e: OSError, path: Path | str) -> OSError:
    """`e` with the file it is about: a failed write() or fsync() does not say which file."""
    if e.filename is not None:
        return e
    return OSError(e.errno, e.strerror or str(e), str(path))


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise named(e, path) from e


SYNCERS = 16  # fsyncs issued at once: they share the file system's journal commits


def in_threads(work: Callable[[Sequence[T]], None], items: Sequence[T], n: int) -> None:
    """`work` on `n` strided slices of `items`, each in a thread (the first in this one): for
    system calls that wait on the disk and overlap (fsync, unlink). n < 2: all here."""
    n = max(1, min(n, len(items)))
    threads = [threading.Thread(target=work, args=(items[i::n],)) for i in range(1, n)]
    for t in threads:
        t.start()
    work(items[::n])
    for t in threads:
        t.join()


def sync_all(files: Sequence[Path | int]) -> None:
    """fsync these files (paths, or open descriptors) or folders, SYNCERS at a time: one after
    another each waits for a journal commit and a disk flush of its own (9 files 41 ms on this
    disk), at once they share them (5 ms). The first OSError, naming its file, is raised."""
    errors: list[OSError] = []

    def sync(some: Sequence[Path | int]) -> None:
        for f in some:
            try:
                if isinstance(f, int):
                    os.fsync(f)
                    continue
                fd = os.open(f, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as e:
                errors.append(named(e, f if isinstance(f, Path) else _fd_name(f)))

    in_threads(sync, files, SYNCERS)
    if errors:
        raise errors[0]


def _fd_name(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"file descriptor {fd}"


def atomic_write_text(path: Path, text: str, fsync: bool = True, fsync_folder: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), fsync, fsync_folder)


def atomic_write_bytes(
    path: Path, data: bytes, fsync: bool = True, fsync_folder: bool = True
) -> None:
    """Write to a new temp file beside `path`, fsync, rename: readers see all or nothing, and a
    link at `path` is replaced, never written through. An OSError names the file.

    Without `fsync_folder` the rename is durable once the folder is fsynced (a run's folder is,
    before its swap: prep.run.guard.install); without `fsync` a power loss may leave the file
    empty or gone (a run's own bookkeeping, checked where it is read), never half written."""
    tmp = temp_path(path)
    # os.open with 0o666 honours the umask, as the shard files do (mkstemp would make 0600,
    # and another account, a shared training user, could not read the manifest).
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o666)
    except OSError as e:  # not ours to remove: a name taken, a folder not writable
        raise named(e, tmp) from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise named(e, tmp) from e
        raise
    if fsync_folder:
        fsync_dir(path.parent)


def npy_header(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    """A version 1.0 .npy header padded to exactly NPY_HEADER_BYTES."""
    d = np.lib.format.header_data_from_array_1_0(np.empty((0,), dtype))
    text = repr({"descr": d["descr"], "fortran_order": False, "shape": tuple(shape)})
    pad = NPY_HEADER_BYTES - 11 - len(text)  # 10 bytes of magic and length, a newline
    if pad < 0:
        raise ValueError(f"shape {shape} does not fit a {NPY_HEADER_BYTES}-byte .npy header")
    magic = b"\x93NUMPY\x01\x00" + (NPY_HEADER_BYTES - 10).to_bytes(2, "little")
    return magic + (text + " " * pad + "\n").encode("latin1")


class NpyWriter:
    """Streams samples of one shape into a .npy file (its header on close); abort() removes it."""

    def __init__(self, path: Path, dtype: str | np.dtype[Any], sample_shape: tuple[int, ...]):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.sample_shape = tuple(sample_shape)
        self.length = 0
        try:
            self._f: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by close() or abort()
        except OSError as e:
            raise named(e, path) from e
        self._write(b"\0" * NPY_HEADER_BYTES)

    def _write(self, data: Any) -> None:
        try:
            self._f.write(data)
        except OSError as e:
            raise named(e, self.path) from e

    def append(self, sample: np.ndarray) -> None:
        self.extend(sample[None])

    def extend(self, samples: np.ndarray) -> None:
        """Append many samples (first axis) in one write, e.g. a run of tokens."""
        if samples.shape[1:] != self.sample_shape or samples.dtype != self.dtype:
            raise ValueError(
                f"{self.path.name}: samples {samples.dtype}{samples.shape[1:]} are not "
                f"{self.dtype}{self.sample_shape}"
            )
        self._write(np.ascontiguousarray(samples).data)
        self.length += len(samples)

    def close(self) -> None:
        self.finish()
        try:
            os.fsync(self._f.fileno())
        except OSError as e:
            raise named(e, self.path) from e
        self.release()

    def finish(self) -> None:
        """The header written and flushed: the file whole, for its fsync (`filenos`), then
        `release`, where a caller fsyncs many files at once (sync_all)."""
        try:
            self._f.seek(0)
            self._f.write(npy_header(self.dtype, (self.length, *self.sample_shape)))
            self._f.flush()
        except OSError as e:
            raise named(e, self.path) from e

    def filenos(self) -> list[int]:
        return [self._f.fileno()]

    def release(self) -> None:
        try:
            self._f.close()
        except OSError as e:
            raise named(e, self.path) from e

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # flushing may fail again (disk full): it goes anyway
            self._f.close()
        self.path.unlink(missing_ok=True)


class RaggedWriter:
    """Samples of any length into a flat .npy, and count + 1 int64 offsets into another."""

    def __init__(self, data: Path, offsets: Path, dtype: str | np.dtype[Any]):
        self.data = NpyWriter(data, dtype, ())
        try:
            self.offsets = NpyWriter(offsets, "int64", ())
        except BaseException:
            self.data.abort()
            raise
        self.offsets.append(np.zeros((), np.int64))

    @property
    def length(self) -> int:
        return self.data.length

    def append(self, sample: np.ndarray) -> None:
        self.data.extend(sample.reshape(-1))
        self.offsets.append(np.asarray(self.data.length, np.int64))

    def extend(self, values: np.ndarray, lengths: np.ndarray) -> None:
        """len(lengths) samples in one write each: `values` holds their elements back to back."""
        self.offsets.extend(self.data.length + np.cumsum(lengths, dtype=np.int64))
        self.data.extend(values)

    def close(self) -> None:
        try:
            self.data.close()
            self.offsets.close()
        except BaseException:
            self.abort()
            raise

    def finish(self) -> None:
        self.data.finish()
        self.offsets.finish()

    def filenos(self) -> list[int]:
        return self.data.filenos() + self.offsets.filenos()

    def release(self) -> None:
        self.data.release()
        self.offsets.release()

    def abort(self) -> None:
        self.data.abort()
        self.offsets.abort()


def publish(tmp: Path, final: Path, digest: str | None = None) -> FileInfo:
    """Rename a finished temp file to its final name; its size and sha256 (`digest` where the
    caller hashed it already) for the manifest."""
    os.replace(tmp, final)
    if digest is None:
        with stage("checksum"):
            digest = sha256_file(final)
    return FileInfo(final.stat().st_size, digest)
