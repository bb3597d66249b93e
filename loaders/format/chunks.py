"""Compressed arrays (docs/format.md, "Compressed arrays"): a .npy of uint8 holding zstd frames of
`chunk` rows each, then the chunk index, count + 1 int64 frame starts. `Chunked` reads one the
way a map is read: a sample or a slice decompresses only the chunks it lies in."""

from __future__ import annotations

import itertools
import math
import mmap
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format.spec import FormatError

# Decompressed chunks a process keeps, all its Chunked arrays together, least recently used out:
# room for two windows of order="chunk_random" (loaders.read.samplers), so that order
# decompresses each chunk about once an epoch; a sequential read needs one or two an array
KEPT_BYTES = 64 << 20
PAGE = mmap.PAGESIZE
# (Windows: no fork, no flags; a map of -1 is the process's own)
PRIVATE = {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_ANONYMOUS") else {}


class _Kept:
    """Which chunks of which Chunked arrays are decompressed, least recently used first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # loader threads share it
        self.chunks: OrderedDict[tuple[int, int], tuple[weakref.ref[Chunked], int]] = OrderedDict()
        self.nbytes = 0

    def add(self, array: Chunked, js: np.ndarray, fresh: list[int]) -> None:
        """Chunks `js` of `array` used now, `fresh` among them just decompressed; the least
        recently used others let go past KEPT_BYTES (never `js`: a read needs them together)."""
        with self.lock:
            for j in np.unique(js).tolist():
                if (array.serial, j) in self.chunks:
                    self.chunks.move_to_end((array.serial, j))
            for j in fresh if not array.whole else []:  # (pinned meanwhile: kept whole)
                if (array.serial, j) not in self.chunks:  # (two threads decompressed it)
                    self.chunks[(array.serial, j)] = (weakref.ref(array), array.chunk_bytes(j))
                    self.nbytes += array.chunk_bytes(j)
            while self.nbytes > KEPT_BYTES and len(self.chunks) > len(np.unique(js)):
                (_, k), (ref, size) = self.chunks.popitem(last=False)
                self.nbytes -= size
                owner = ref()
                if owner is not None:
                    owner.let_go(k)

    def forget(self, serial: int) -> None:
        """An array's chunks, once it is closed (its buffer unmapped with it)."""
        with self.lock:
            self._drop(serial)

    def _drop(self, serial: int) -> None:
        for key in [key for key in self.chunks if key[0] == serial]:
            self.nbytes -= self.chunks.pop(key)[1]

    def pin(self, array: Chunked) -> None:
        """Keep the whole array (np.asarray) if every chunk is in: its chunks leave the count."""
        with self.lock:
            if bool(array.have.all()):
                array.whole = True
                self._drop(array.serial)


_KEPT = _Kept()
_SERIAL = itertools.count()  # a Chunked's key in _KEPT


class ZstdLayout(tuple[int, np.dtype[Any], tuple[int, ...]]):
    """A compressed array's Layout: (payload offset, dtype, shape as read) and `chunk` rows."""

    chunk: int
    frames: int  # payload bytes before the chunk index


def chunk_count(rows: int, chunk: int) -> int:
    """Frames of an array of `rows` rows (ragged: elements), `chunk` a frame.

    >>> chunk_count(0, 4), chunk_count(4, 4), chunk_count(5, 4)
    (0, 1, 2)
    """
    return -(-rows // chunk)


def zstd_layout(
    path: Path, offset: int, payload: int, dtype: np.dtype[Any], shape: tuple[int, ...], chunk: int
) -> ZstdLayout:
    """The layout of a payload of `payload` bytes at `offset`, its chunk index checked."""
    n = chunk_count(shape[0], chunk)
    frames = payload - 8 * (n + 1)
    if frames < 0:
        raise FormatError(f"{path}: too short for the index of its {n} chunks. HINT: repack")
    with open(path, "rb", buffering=0) as f:
        f.seek(offset + frames)
        table = np.frombuffer(f.read(8 * (n + 1)), "<i8")
    ok = len(table) == n + 1 and table[0] == 0 and table[-1] == frames
    if not (ok and bool(np.all(table[1:] >= table[:-1]))):
        raise FormatError(
            f"{path}: its chunk index is not {n + 1} rising frame starts from 0 to {frames}. "
            "HINT: the file was changed after packing; repack"
        )
    layout = ZstdLayout((offset, dtype, shape))
    layout.chunk, layout.frames = chunk, frames
    return layout


class Chunked:
    """A read-only compressed array that numpy reads like an ndarray: an index, a slice or an
    integer array decompresses the chunks it needs into a buffer of the array's shape (its
    pages taken as written; the process keeps KEPT_BYTES of chunks, the rest given back to the
    system), then reads the buffer as raw; np.asarray keeps the whole array. Reads return
    copies. `frames_read` counts the chunks decompressed into the buffer."""

    def __init__(self, path: Path, layout: ZstdLayout):
        try:
            import zstandard  # noqa: F401  (only for a compressed dataset)
        except ImportError as e:
            raise ImportError(
                f"{path} is zstd-compressed; reading it needs zstandard. "
                "HINT: pip install 'prep[zstd]'"
            ) from e
        self.path, (self.offset, self.dtype, self.shape) = path, layout
        self.chunk, self.ndim = layout.chunk, len(self.shape)
        self.row = math.prod(self.shape[1:])
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        n = chunk_count(self.shape[0], self.chunk)
        start = self.offset + layout.frames
        self._table = np.frombuffer(self._map, "<i8", n + 1, start).astype(np.int64) + self.offset
        self._local = threading.local()  # a ZstdDecompressor serves one thread at a time
        self.serial, self.lets_go = next(_SERIAL), 0
        self.frames_read = self.tails_read = 0  # chunks decompressed into the buffer, apart
        self.have, self.whole = np.zeros(n, bool), n == 0
        # private: a forked worker's chunks are its own (a shared map would let one process
        # give back the pages another reads); anonymous: untouched pages cost no memory
        self._buf = mmap.mmap(-1, max(1, self.nbytes), **PRIVATE)
        self._bytes = np.frombuffer(self._buf, np.uint8, self.nbytes)
        self._array = self._bytes.view(self.dtype).reshape(self.shape)
        weakref.finalize(self, _KEPT.forget, self.serial)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def chunk_bytes(self, j: int) -> int:
        return min(self.chunk, self.shape[0] - j * self.chunk) * self.row * self.dtype.itemsize

    def let_go(self, j: int) -> None:
        """Give chunk j's pages back (those wholly its own); a read under way sees `lets_go`
        change and reads again."""
        self.have[j] = False
        self.lets_go += 1
        start = j * self.chunk * self.row * self.dtype.itemsize
        first, stop = -(-start // PAGE) * PAGE, (start + self.chunk_bytes(j)) // PAGE * PAGE
        if stop > first and hasattr(self._buf, "madvise"):  # (without: the memory stays taken)
            self._buf.madvise(mmap.MADV_DONTNEED, first, stop - first)

    def _frame(self, j: int) -> bytes:
        """Chunk j decompressed and checked (FormatError: a bad frame)."""
        want = self.chunk_bytes(j)
        import zstandard

        frame = self._map[self._table[j] : self._table[j + 1]]
        try:
            # the size its header claims, before any allocation of it
            if zstandard.frame_content_size(frame) != want:
                raise zstandard.ZstdError(f"its header says not {want} bytes")
            raw = self._decompressor().decompress(frame, max_output_size=want)
        except zstandard.ZstdError as e:
            raise FormatError(
                f"{self.path}: chunk {j} cannot be decompressed ({e}). HINT: repack"
            ) from None
        if len(raw) != want:
            raise FormatError(f"{self.path}: chunk {j} holds {len(raw)} bytes, not {want}")
        return raw

    def _apart(self, j: int) -> np.ndarray:
        """Chunk j's rows, decompressed apart from the buffer (not kept)."""
        self.tails_read += 1
        return np.frombuffer(self._frame(j), self.dtype).reshape(-1, *self.shape[1:])

    def _decompressor(self) -> Any:
        found = getattr(self._local, "zstd", None)
        if found is None:
            import zstandard

            found = self._local.zstd = zstandard.ZstdDecompressor()
        return found

    def _read(self, js: np.ndarray, read: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """read(buffer) once chunks `js` are in it, again if another thread let one go."""
        while True:
            if self.whole:
                return read(self._array)
            seen = self.lets_go  # before the check: a chunk let go after it changes it
            if bool(self.have[js].all()):
                got = read(self._array)
                if self.lets_go == seen:
                    return got
                continue
            fresh = np.unique(js[~self.have[js]]).tolist()
            for j in fresh:
                start = j * self.chunk * self.row * self.dtype.itemsize
                raw = self._frame(j)
                self._bytes[start : start + len(raw)] = np.frombuffer(raw, np.uint8)
                self.have[j], self.frames_read = True, self.frames_read + 1
            _KEPT.add(self, js, fresh)

    def _span(self, start: int, stop: int) -> np.ndarray:
        """Rows start..stop-1 (0 <= start <= stop <= len)."""
        js = np.arange(start // self.chunk, -(-stop // self.chunk))
        return self._read(js, lambda a: a[start:stop].copy())

    def _rows(self, index: np.ndarray) -> np.ndarray:
        """Rows at an integer array of any shape (numpy's bounds rule: IndexError)."""
        n = self.shape[0]
        if index.size and (index.min() < -n or index.max() >= n):
            raise IndexError(f"index out of bounds for {n} rows of {self.path}")
        if index.size and index.min() < 0:
            index = np.where(index < 0, index + n, index)
        used = np.zeros(len(self.have), bool)  # no sort: a mark a chunk
        used[index.reshape(-1) // self.chunk] = True
        return self._read(np.flatnonzero(used), lambda a: a[index])

    def windows(self, starts: np.ndarray, width: int) -> np.ndarray:
        """Rows starts[i] .. starts[i] + width - 1 as row i (each within the array): the
        chunks the starts lie in, then one gather. A window's tail in the next chunk, when that
        is not kept, is decompressed apart ("chunk_random" reads that chunk with its own
        window: keeping it now would let go of one this window's group needs)."""
        if width > self.chunk:
            return self._rows(starts[:, None] + np.arange(width))
        first, last = starts // self.chunk, (starts + (width - 1)) // self.chunk
        straddle = np.flatnonzero(last != first).tolist()

        def read(a: np.ndarray) -> np.ndarray:
            loose = [r for r in straddle if not self.have[last[r]]]  # before the gather reads
            out = a[starts[:, None] + np.arange(width)]
            tails: dict[int, np.ndarray] = {}
            for r in loose:
                j, cut = int(last[r]), int(last[r] * self.chunk - starts[r])
                if j not in tails:
                    tails[j] = self._apart(j)
                out[r, cut:] = tails[j][: width - cut]
            return out

        return self._read(first, read)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int | np.integer):
            k = int(key) + (self.shape[0] if key < 0 else 0)
            if not 0 <= k < self.shape[0]:
                raise IndexError(f"index {int(key)} is out of bounds for {self.shape[0]} rows")
            return self._span(k, k + 1)[0]
        if isinstance(key, slice) and key.step in (None, 1):
            start, stop, _ = key.indices(self.shape[0])
            return self._span(start, max(start, stop))
        if isinstance(key, np.ndarray | list) and np.asarray(key).dtype.kind in "iu":
            return self._rows(np.asarray(key, np.int64))
        if isinstance(key, tuple) and key and isinstance(key[0], int | np.integer | slice):
            rows = self[key[0]]  # a crop of a sample: its rows, then the rest
            return rows[
                key[1:] if isinstance(key[0], int | np.integer) else (slice(None), *key[1:])
            ]
        return self.__array__()[key]

    def take(self, indices: Any, axis: int = 0, out: Any = None, mode: str = "raise") -> Any:
        """np.take along the first axis (mode clip: the indices are checked already)."""
        if axis != 0:
            return np.take(self.__array__(), indices, axis, out, mode)  # type: ignore[call-overload]
        index = np.asarray(indices, np.int64)
        got = self._rows(np.clip(index, 0, self.shape[0] - 1) if mode == "clip" else index)
        if out is None:
            return got
        out[...] = got
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        every = np.arange(len(self.have))
        while not self.whole:  # kept: what asks for the whole array asks again
            self._read(every, lambda a: a[:0])
            _KEPT.pin(self)
        whole = self._array.view()
        whole.flags.writeable = False
        return whole if dtype is None else whole.astype(dtype)
