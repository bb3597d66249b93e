"""A field: one named entry of a sample, an encoder (numpy only) and a decoder, with the arrays it
stores and their checks; the manifest records its `describe()` (read with no user code)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from loaders.format.spec import ArraySpec, array_name

RAGGED_POLICIES = ("pad", "list", "jagged")
RESERVED = frozenset({"index"})  # array names the datasets give meaning to (the dataset index)
RESERVED_SUFFIXES = ("_len", "_hw", "_crc", ".offsets")
Piece = Callable[[str], np.ndarray]  # array name -> one sample's row of it (ragged: its piece)


class FieldError(ValueError):
    """A sample's value does not fit its field: `code` is the reject reason, `str()` the line."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class Reading(Protocol):
    """What a field's decoder is given of a batch (loaders.datasets.samples)."""

    size: int | None  # the dataset's size, for sized fields

    def values(self, name: str) -> np.ndarray: ...  # a raw array's samples stacked (B, *shape)
    def pieces(self, name: str) -> list[np.ndarray]: ...  # a ragged array's samples, each flat
    def images(self, field: Field, name: str) -> Any: ...  # decoded, cropped: (B, C, H, W)
    def where(self, name: str) -> Sequence[str]: ...  # each sample's "FILE (shard S, sample K)"
    # image field `image`'s crops (top, left, height, width) (B, 4), the (h, w) they are resized to
    def crops(self, image: str) -> tuple[np.ndarray, tuple[int, int]] | None: ...


@dataclass(frozen=True)
class Field:
    """One field kind (loaders.fields.KINDS), a frozen dataclass of its declaration."""

    kind: ClassVar[str]
    ragged: ClassVar[bool] = False  # a ragged field's batches follow a policy (pad, list, jagged)
    placed: ClassVar[bool] = False  # placed on an image field (loaders.fields.image.Placed)
    heading: ClassVar[str | None] = None  # `prep info`: the line above the kind's first `lines`
    layer: ClassVar[int] = 0  # fields are drawn on a picture in layers: fills (0), then lines (1)

    def arrays(self, name: str) -> list[ArraySpec]:
        """The arrays the field stores under `name`, in manifest order."""
        raise NotImplementedError

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        """One value -> its stored sample per array suffix ("", "_hw_256"...); FieldError if odd."""
        raise NotImplementedError

    def read(self, batch: Reading, name: str, policy: str) -> Any:
        raise NotImplementedError

    def follows(self) -> str | None:
        """What transforms move this field as (loaders.datasets.samples): "image", "per_box"..."""
        return None

    def dtypes(self, declared: ArraySpec) -> tuple[str, ...]:
        """The dtypes a manifest may give array `declared` (a label: any unsigned width)."""
        return (declared.dtype,)

    def check_arrays(self, name: str, stored: Mapping[str, ArraySpec]) -> str | None:
        """Why the manifest's arrays are not the ones this field declares (None: they are)."""
        for want in self.arrays(name):
            array = array_name(want.field, want.size)
            got = stored.get(array)
            if got is None:
                return f"array {array} of field {name} is not among the manifest's arrays"
            if got.codec != want.codec:
                return f"array {array}: codec {got.codec} is not {want.codec} ({name}'s)"
            if got.dtype not in self.dtypes(want):
                return f"array {array}: dtype {got.dtype} is not one of {self.dtypes(want)}"
            # an image's channels are judged by its files' headers: 1 or 3, whatever `gray` says
            shapes = [(*want.shape[:2], c) for c in (1, 3)] if want.role == "image" else []
            if got.shape not in [want.shape, *shapes]:
                shape = list(got.shape)
                return f"array {array}: shape {shape} is not {self.kind}'s at size {want.size}"
        return None

    def check_extra(self, name: str, extra: Mapping[str, Any], count: int) -> None:
        """FormatError unless the manifest's `extra` holds what the field's readers take."""

    def problems(self, name: str, arrays: Mapping[str, np.ndarray]) -> list[str]:
        """What is wrong with one shard's values of the field (small arrays, read whole)."""
        return []

    def needs(self, name: str) -> list[str]:
        """Arrays of other fields `problems` reads (a mask: its image's sides)."""
        return []

    def limits(self, name: str) -> dict[str, tuple[int, str]]:
        """Integer arrays `prep verify` bounds: array -> (the largest value, the line past it)."""
        return {}

    def files(self, name: str) -> dict[str, str | None]:
        """Files the field keeps in the dataset's folder beside the shards: name -> sha256."""
        return {}

    def lines(self, name: str, m: Any) -> list[str]:
        """What `prep info` says of the field in manifest `m` beyond its declaration."""
        return []

    def read_dtype(self, declared: ArraySpec) -> str:
        """The dtype a dataset returns array `declared` in (a label: int64)."""
        return declared.dtype

    def value(self, name: str, piece: Piece, size: int | None) -> Any:
        """One sample as numpy, as stored, at `size`; FormatError where it does not decode."""
        return piece(name)

    def pictures(self, value: Any) -> list[tuple[np.ndarray, str]]:
        """The value as (H, W, 3) uint8 pictures, each with a caption (a frame's time...)."""
        return []

    def drawn_on(self) -> str | None:
        """The field whose pictures this one is drawn on (a mask's image)."""
        return None

    def draw(self, pictures: list[np.ndarray], value: Any, scale: float) -> list[np.ndarray]:
        """The `drawn_on` field's pictures (stored pixels times `scale`), this value drawn on."""
        return pictures

    def caption(self, value: Any) -> str:
        """What a sample's caption says of the value (a label's class name)."""
        return ""

    def describe(self) -> dict[str, Any]:
        """The declaration: the manifest's `fields[NAME]`."""
        d: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            d[f.name] = list(v) if isinstance(v, tuple) else v
        return d

    @classmethod
    def from_description(cls, d: dict[str, Any]) -> Field:
        """The field a manifest describes (the inverse of `describe`); ValueError if odd."""
        names = {f.name for f in dataclasses.fields(cls)}
        args = {k: _tuples(v) for k, v in d.items() if k != "kind"}
        if not set(args) <= names:
            raise ValueError(f"{cls.kind} field has unknown keys {sorted(set(args) - names)}")
        return cls(**args)


def _tuples(v: Any) -> Any:
    """A manifest's lists as tuples, nested ones too (a table's vocabularies: 22k values a field
    set, where one call a value took 40 ms)."""
    if not isinstance(v, list):
        return v
    t = tuple(v)
    return tuple(map(_tuples, t)) if list in set(map(type, t)) else t


def check_name(name: str, declared: bool = True) -> str | None:
    """Why `name` cannot name a field (None: it can); a manifest's (not `declared`) may be num_3."""
    if not isinstance(name, str) or not name.isidentifier():
        return f"field name {name!r} is not a Python identifier"
    if name in RESERVED or name.endswith(RESERVED_SUFFIXES):
        return f"field name {name!r} clashes with the names datasets add (index, NAME_len...)"
    if declared and re.fullmatch(r".*_[0-9]+", name):
        return f"field name {name!r} ends like a sized array's name (NAME_SIZE)"
    return None


def as_array(value: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """`value` as `dtype`: an ndarray must have it (no silent cast), numbers and lists fit it."""
    if isinstance(value, np.ndarray):
        if value.dtype != dtype:
            raise FieldError("field_dtype", f"dtype {value.dtype}, the field says {dtype}")
        return value
    if isinstance(value, (str, bytes, dict)) or value is None:
        raise FieldError("field_type", f"a {type(value).__name__}, not numbers")
    try:
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf" or (arr.dtype.kind == "f" and dtype.kind in "iub"):
            raise ValueError(f"{arr.dtype} values")
        out = arr.astype(dtype)
        if not np.array_equal(out, arr, equal_nan=dtype.kind == "f") and dtype.kind != "f":
            raise ValueError(f"values out of {dtype}'s range")
    except (ValueError, TypeError, OverflowError) as e:
        raise FieldError("field_dtype", f"not {dtype} numbers ({e})") from None
    return out


def spec(
    name: str,
    role: str,
    dtype: str,
    shape: Sequence[int],
    codec: str = "raw",
    size: int | None = None,
) -> ArraySpec:
    """An array of a field at `size` px (None: size-free), `role` what it is to the field."""
    return ArraySpec(name, size, dtype, tuple(shape), codec, role)


def tensor(values: np.ndarray) -> Any:
    """torch.from_numpy, with torch imported here: the field kinds (and packing) need numpy only."""
    import torch

    return torch.from_numpy(values)


def ragged_batch(
    name: str, pieces: list[np.ndarray], row: tuple[int, ...], policy: str
) -> dict[str, Any]:
    """A batch of a ragged field's flat samples of rows `row`, by `policy`: `pad` (to the longest,
    with `NAME_len`), `list` (a tensor a sample, as torchvision's detection models take them) or
    `jagged` (torch.nested.nested_tensor_from_jagged).

    >>> out = ragged_batch("b", [np.arange(4.0), np.zeros(0)], (2,), "pad")
    >>> out["b"].shape, out["b_len"].tolist()
    (torch.Size([2, 2, 2]), [2, 0])
    """
    import torch  # as in tensor()

    rows = [p.reshape(-1, *row) for p in pieces]
    if policy == "list":
        return {name: [torch.from_numpy(np.array(r)) for r in rows]}  # copies: maps are read-only
    lens = np.array([len(r) for r in rows], dtype=np.int64)
    dtype = pieces[0].dtype if pieces else np.dtype("float32")
    if policy == "jagged":
        values = np.concatenate(rows) if rows else np.zeros((0, *row), dtype)
        offsets = np.concatenate([[0], np.cumsum(lens)])
        nested = torch.nested.nested_tensor_from_jagged(
            torch.from_numpy(values), torch.from_numpy(offsets)
        )
        return {name: nested}
    out = np.zeros((len(rows), int(lens.max(initial=0)), *row), dtype)
    for j, r in enumerate(rows):
        out[j, : len(r)] = r
    return {name: torch.from_numpy(out), f"{name}_len": torch.from_numpy(lens)}


def encode_source(path: str) -> np.ndarray:
    """A source path as a Text field's sample, the bytes of undecodable file names kept.

    >>> decode_source(encode_source("cat/001.jpg"))
    'cat/001.jpg'
    """
    return np.frombuffer(path.encode("utf-8", "surrogateescape"), dtype=np.uint8)


def decode_source(data: np.ndarray) -> str:
    """A stored source path back as text (bytes that are not UTF-8 shown as U+FFFD)."""
    return np.asarray(data, dtype=np.uint8).tobytes().decode("utf-8", "replace")
