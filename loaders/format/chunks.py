"""Compressed arrays (docs/format.md, "Compressed arrays"): a .npy of uint8 holding zstd frames of
`chunk` rows each, then the chunk index, count + 1 int64 frame starts. `Chunked` reads one the
way a map is read: a sample or a slice decompresses only the chunks it lies in."""

from __future__ import annotations

import math
import mmap
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format.spec import FormatError

KEPT_CHUNKS = 4  # decompressed chunks a Chunked keeps: a batch's samples are mostly neighbours


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
    integer array decompresses the chunks it needs (the last KEPT_CHUNKS kept); anything else
    (np.asarray) the whole array once."""

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
        self._lock = threading.Lock()
        self._kept: OrderedDict[int, np.ndarray] = OrderedDict()
        self._whole: np.ndarray | None = None

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def chunk_rows(self, j: int) -> np.ndarray:
        """Chunk `j`'s rows, decompressed and checked (FormatError: a bad frame). Loader threads
        share the array: the kept chunks under a lock, a decompressor a thread."""
        with self._lock:
            found = self._kept.get(j)
            if found is not None:
                self._kept.move_to_end(j)
                return found
        rows = min(self.chunk, self.shape[0] - j * self.chunk)
        want = rows * self.row * self.dtype.itemsize
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
        found = np.frombuffer(raw, self.dtype).reshape(rows, *self.shape[1:])
        with self._lock:
            self._kept[j] = found
            while len(self._kept) > KEPT_CHUNKS:
                self._kept.popitem(last=False)
        return found

    def _decompressor(self) -> Any:
        found = getattr(self._local, "zstd", None)
        if found is None:
            import zstandard

            found = self._local.zstd = zstandard.ZstdDecompressor()
        return found

    def _span(self, start: int, stop: int) -> np.ndarray:
        """Rows start..stop-1 (0 <= start <= stop <= len)."""
        if self._whole is not None:
            return self._whole[start:stop]
        first, last = start // self.chunk, (stop - 1) // self.chunk
        if stop <= start:
            return np.empty((0, *self.shape[1:]), self.dtype)
        if first == last:
            base = first * self.chunk
            return self.chunk_rows(first)[start - base : stop - base]
        parts = [self.chunk_rows(j) for j in range(first, last + 1)]
        base = first * self.chunk
        return np.concatenate(parts)[start - base : stop - base]

    def _rows(self, index: np.ndarray) -> np.ndarray:
        """Rows at an integer array of any shape (numpy's bounds rule: IndexError)."""
        n = self.shape[0]
        if index.size and (index.min() < -n or index.max() >= n):
            raise IndexError(f"index out of bounds for {n} rows of {self.path}")
        index = np.where(index < 0, index + n, index)
        if self._whole is not None:
            return self._whole[index]
        flat = index.reshape(-1)
        out = np.empty((len(flat), *self.shape[1:]), self.dtype)
        # grouped by chunk with one sort: a mask per chunk costs chunks x indices
        order = np.argsort(flat, kind="stable")
        which = flat[order] // self.chunk
        cuts = np.flatnonzero(np.diff(which)) + 1
        for group in np.split(order, cuts) if len(order) else []:
            j = int(flat[group[0]] // self.chunk)
            out[group] = self.chunk_rows(j)[flat[group] - j * self.chunk]
        return out.reshape(*index.shape, *self.shape[1:])

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
        if self._whole is None:  # kept: what asks for the whole array asks again
            whole = (
                self._span(0, self.shape[0]) if self.shape[0] else np.empty(self.shape, self.dtype)
            )
            self._whole = whole.reshape(self.shape)
            self._whole.flags.writeable = False
        return self._whole if dtype is None else self._whole.astype(dtype)
