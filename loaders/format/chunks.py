"""Compressed arrays (docs/format.md, "Compressed arrays"): a .npy of uint8 holding zstd frames of
`chunk` rows each, then the chunk index, count + 1 int64 frame starts. `Chunked` reads one the
way a map is read: a sample or a slice decompresses only the chunks it lies in."""

from __future__ import annotations

import math
import mmap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format.kept import KEPT, SLOT_BYTES
from loaders.format.spec import FormatError


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
    integer array decompresses the chunks it needs into the process's kept chunks
    (loaders.format.kept: KEPT_BYTES of them, all arrays together), then gathers from them at
    once; np.asarray decompresses the whole array and keeps it. Reads return copies.
    `frames_read` counts the chunks decompressed into the kept ones."""

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
        self.slot_of, self.lets_go = np.full(n, -1, np.int64), 0  # (loaders.format.kept)
        self.frames_read = self.tails_read = 0  # chunks decompressed into slots, apart
        self._view: tuple[np.ndarray | None, np.ndarray] = (None, np.empty(0))  # _slots'
        self._whole: np.ndarray | None = None  # np.asarray's: (chunks, chunk, *row), padded
        # a chunk larger than a slot (rows over SLOT_BYTES) is decompressed apart each read
        self._slotted = self.chunk * self.row * self.dtype.itemsize <= SLOT_BYTES

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

    def _frame(self, j: int, into: np.ndarray) -> None:
        """Chunk j decompressed straight into `into` (uint8, at least its bytes), checked
        (FormatError: a bad frame)."""
        want, got = self.chunk_bytes(j), 0
        import zstandard

        frame = self._map[self._table[j] : self._table[j + 1]]
        try:
            # the size its header claims, before any write of it
            if zstandard.frame_content_size(frame) != want:
                raise zstandard.ZstdError(f"its header says not {want} bytes")
            reader = self._decompressor().stream_reader(frame)
            while got < want and (n := reader.readinto(into[got:want])):
                got += n
            got += len(reader.read(1))  # the frame's end: checked, nothing after it
        except zstandard.ZstdError as e:
            raise FormatError(
                f"{self.path}: chunk {j} cannot be decompressed ({e}). HINT: repack"
            ) from None
        if got != want:
            raise FormatError(f"{self.path}: chunk {j} holds not {want} bytes. HINT: repack")

    def _frames(self, first: int, stop: int, into: np.ndarray) -> None:
        """Chunks first .. stop-1, whole ones, straight into `into` (uint8, their bytes) by one
        reader across their frames, which lie end to end (not a reader and its checks a chunk:
        masks read 5% faster); on a bad frame, each chunk read alone names it."""
        import zstandard

        frames, got = self._map[self._table[first] : self._table[stop]], 0
        try:
            reader = self._decompressor().stream_reader(frames, read_across_frames=True)
            while got < len(into) and (n := reader.readinto(into[got:])):
                got += n
            got += len(reader.read(1))  # the last frame's end: nothing after it
        except zstandard.ZstdError:
            got = -1
        if got != len(into):
            size = self.chunk_bytes(first)
            for j in range(first, stop):  # FormatError on the first bad one
                self._frame(j, into[(j - first) * size :])
            raise FormatError(
                f"{self.path}: chunks {first}-{stop - 1} differ from their index. HINT: repack"
            )

    def _apart(self, j: int) -> np.ndarray:
        """Chunk j's rows, decompressed apart from the kept ones."""
        raw = np.empty(self.chunk_bytes(j), np.uint8)
        self._frame(j, raw)
        return raw.view(self.dtype).reshape(-1, *self.shape[1:])

    def _decompressor(self) -> Any:
        found = getattr(self._local, "zstd", None)
        if found is None:
            import zstandard

            found = self._local.zstd = zstandard.ZstdDecompressor()
        return found

    def _slots(self, slab: np.ndarray) -> np.ndarray:
        """`slab` (slots, bytes) as (slots, rows a slot, *row) of the array's dtype."""
        if self._view[0] is slab:  # (the process's buffer: made once, not a read)
            return self._view[1]
        per = slab.shape[1] // (self.row * self.dtype.itemsize)
        rows = slab.view(self.dtype)[:, : per * self.row]
        view = rows.reshape(len(slab), per, *self.shape[1:])
        if slab is KEPT.slab:
            self._view = (slab, view)
        return view

    def _read(self, js: np.ndarray, read: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Any:
        """read(slots, slot_of): chunk j's rows are slots[slot_of[j]], for the chunks `js`;
        read again if another thread let one go meanwhile."""
        while True:
            if self._whole is not None:
                return read(self._whole, np.arange(len(self.slot_of)))
            seen = self.lets_go  # before the check: a chunk let go after it changes it
            if bool((self.slot_of[js] >= 0).all()):
                got = read(self._slots(KEPT.slab), self.slot_of)
                if self.lets_go == seen:
                    return got
                continue
            fresh = np.unique(js[self.slot_of[js] < 0]).tolist()
            slab, slots = KEPT.reserve(self, fresh, js) if self._slotted else (KEPT.slab, [])
            done = 0
            try:
                for j, slot in slots:
                    self._frame(j, slab[slot])
                    KEPT.publish(self, j, slot, True)
                    done, self.frames_read = done + 1, self.frames_read + 1
            finally:  # a bad frame: every slot reserved and not filled is free again
                for j, slot in slots[done:]:
                    KEPT.publish(self, j, slot, False)
            if len(slots) < len(fresh):  # more chunks than slots: these ones apart, not kept
                return self._read_apart(np.unique(js), read)

    def _read_apart(
        self, js: np.ndarray, read: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> Any:
        slab = np.empty((len(js), self.chunk * self.row * self.dtype.itemsize), np.uint8)
        slot_of = np.full(len(self.slot_of), -1, np.int64)
        for slot, j in enumerate(js.tolist()):
            self._frame(j, slab[slot])
            slot_of[j] = slot
        return read(self._slots(slab), slot_of)

    def _span(self, start: int, stop: int) -> np.ndarray:
        """Rows start..stop-1 (0 <= start <= stop <= len)."""
        if stop <= start:
            return np.empty((0, *self.shape[1:]), self.dtype)
        c = self.chunk
        first, last = start // c, (stop - 1) // c
        seen, slot = self.lets_go, int(self.slot_of[first])
        if first == last and slot >= 0 and self._whole is None:  # (a sample kept: no arrays)
            got = self._slots(KEPT.slab)[slot, start - first * c : stop - first * c].copy()
            if self.lets_go == seen:
                return got

        def read(v: np.ndarray, slot_of: np.ndarray) -> np.ndarray:
            if first == last:  # (a sample, mostly: one slice)
                return v[slot_of[first], start - first * c : stop - first * c].copy()
            at = [(j, max(start - j * c, 0), min(stop - j * c, c)) for j in range(first, last + 1)]
            return np.concatenate([v[slot_of[j], a:b] for j, a, b in at])  # (a slot: >= c rows)

        return self._read(np.arange(first, last + 1), read)

    def _rows(self, index: np.ndarray) -> np.ndarray:
        """Rows at an integer array of any shape (numpy's bounds rule: IndexError)."""
        n = self.shape[0]
        if index.size and (index.min() < -n or index.max() >= n):
            raise IndexError(f"index out of bounds for {n} rows of {self.path}")
        if index.size and index.min() < 0:
            index = np.where(index < 0, index + n, index)
        which, local = np.divmod(index, self.chunk)
        used = np.zeros(len(self.slot_of), bool)  # no sort: a mark a chunk
        used[which.reshape(-1)] = True
        return self._read(np.flatnonzero(used), lambda v, slot_of: v[slot_of[which], local])

    def windows(self, starts: np.ndarray, width: int) -> np.ndarray:
        """Of a 1-d array, rows starts[i] .. starts[i] + width - 1 as row i (each within the
        array): the chunks the starts lie in, then one gather. A window's tail in the next
        chunk, when that is not kept, is decompressed apart ("chunk_random" reads that chunk
        with its own window: keeping it now would let go of one this window's group needs)."""
        if width > self.chunk or self.ndim != 1:
            return self._rows(starts[:, None] + np.arange(width))
        first, local = np.divmod(starts, self.chunk)
        straddle = np.flatnonzero(local + width > self.chunk).tolist()

        def read(v: np.ndarray, slot_of: np.ndarray) -> np.ndarray:
            at = (slot_of[first] * v.shape[1] + local)[:, None] + np.arange(width)
            out = v.reshape(-1).take(at, mode="clip")  # (a straddler's tail: set below)
            for r in straddle:
                j, cut = int(first[r]) + 1, int(self.chunk - local[r])
                if slot_of[j] >= 0:  # kept
                    out[r, cut:] = v[slot_of[j], : width - cut]
                else:
                    out[r, cut:] = self._apart(j)[: width - cut]
                    self.tails_read += 1
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
        if mode == "clip":
            index = np.clip(index, 0, self.shape[0] - 1)
        if out is not None and self._into(index, out):
            return out
        got = self._rows(index)
        if out is None:
            return got
        out[...] = got
        return out

    def _into(self, index: np.ndarray, out: np.ndarray) -> bool:
        """Rows a, a+1, .. a+n-1 into `out` (C-contiguous, the array's dtype): the chunks they
        cover whole decompressed straight into it (one pass over the memory, as a raw read;
        not kept: a read in order needs them once), the rows at either end as any read. False:
        not such a read."""
        n, c = len(index), self.chunk
        if index.ndim != 1 or n < c or self._whole is not None or out.dtype != self.dtype:
            return False
        a = int(index[0])
        if not (out.flags.c_contiguous and out.shape == (n, *self.shape[1:])):
            return False
        if not np.array_equal(index, np.arange(a, a + n)):
            return False
        first, stop = -(-a // c), (a + n) // c  # the chunks inside rows a .. a+n-1
        flat, row = out.reshape(-1).view(np.uint8), self.row * self.dtype.itemsize
        if stop > first:
            self._frames(first, stop, flat[(first * c - a) * row : (stop * c - a) * row])
        head, tail = min(first * c, a + n), max(stop * c, first * c)
        out[: head - a] = self._span(a, head)
        out[tail - a :] = self._span(tail, a + n)
        return True

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self._whole is None:  # kept: what asks for the whole array asks again
            n = len(self.slot_of)
            whole = np.empty((n, self.chunk, *self.shape[1:]), self.dtype)
            for j in range(n):
                rows = self._apart(j)
                whole[j, : len(rows)] = rows
            whole.flags.writeable = False
            self._whole = whole
        array = self._whole.reshape(-1, *self.shape[1:])[: self.shape[0]]
        return array if dtype is None else array.astype(dtype)
