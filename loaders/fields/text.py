"""Byte-string fields, ragged uint8: `Text` (UTF-8, read as str), `Bytes` (read as bytes) and
`Json` (small JSON values, read as Python objects).

>>> Json().encode({"id": 7})[""].tobytes()
b'{"id":7}'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from loaders.fields.base import Field, FieldError, Piece, Reading, spec
from loaders.format.spec import ArraySpec, FormatError

MAX_JSON_BYTES = 1 << 20  # "small JSON": per-sample metadata, not a payload


@dataclass(frozen=True)
class Bytes(Field):
    """Opaque bytes a sample (a file's content, a serialised object of the user's).

    Examples:
        >>> from prep.fields import Bytes, Image
        >>> fields = {"image": Image(), "raw_exif": Bytes()}
    """

    kind = "bytes"

    def arrays(self, name: str) -> list[ArraySpec]:
        return [spec(name, self.kind, "uint8", (), "ragged")]

    def to_bytes(self, value: Any) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise FieldError("field_type", f"a {type(value).__name__}, not bytes")
        return bytes(value)

    def encode(self, value: Any) -> dict[str, np.ndarray]:
        return {"": np.frombuffer(self.to_bytes(value), dtype=np.uint8)}

    def from_bytes(self, data: bytes) -> Any:
        return data

    def read(self, batch: Reading, name: str, policy: str) -> dict[str, Any]:
        out = []
        for j, piece in enumerate(batch.pieces(name)):
            try:
                out.append(self.from_bytes(piece.tobytes()))
            except ValueError as e:  # JSON that is not (Json's): `prep verify` checks, not the open
                raise FormatError(
                    f"{batch.where(name)[j]}: field {name} is not JSON ({e}). "
                    "HINT: run `prep verify`, then repack"
                ) from None
        return {name: out}

    def value(self, name: str, piece: Piece, size: int | None) -> Any:
        try:
            return self.from_bytes(np.asarray(piece(name)).tobytes())
        except ValueError as e:  # as in read
            raise FormatError(f"field {name} is not {self.kind} ({e})") from None

    def caption(self, value: Any) -> str:
        """The value in one line (a long one is cut where the caption is drawn)."""
        if isinstance(value, bytes):
            return f"{len(value):,} bytes"
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return " ".join(text.split())


@dataclass(frozen=True)
class Text(Bytes):
    """A str, stored as UTF-8.

    Examples:
        >>> from prep.fields import Image, Text
        >>> fields = {"image": Image(), "caption": Text()}
    """

    kind = "text"

    def to_bytes(self, value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray)):
            try:
                bytes(value).decode("utf-8")
            except UnicodeDecodeError as e:
                raise FieldError("field_utf8", f"bytes that are not UTF-8 ({e.reason})") from None
            return bytes(value)
        if not isinstance(value, str):
            raise FieldError("field_type", f"a {type(value).__name__}, not a str")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise FieldError("field_utf8", f"a str with no UTF-8 form ({e.reason})") from None

    def from_bytes(self, data: bytes) -> Any:
        return data.decode("utf-8", errors="replace")  # checked at pack: replace is for bit rot


@dataclass(frozen=True)
class Json(Bytes):
    """A JSON value: compact, keys sorted, at most 1 MiB a sample.

    Examples:
        >>> from prep.fields import Image, Json
        >>> fields = {"image": Image(), "meta": Json()}  # e.g. {"id": 7, "tags": ["a"]}
    """

    kind = "json"

    def to_bytes(self, value: Any) -> bytes:
        try:
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise FieldError("field_json", f"does not serialise as JSON ({e})") from None
        if len(text) > MAX_JSON_BYTES:
            raise FieldError("field_json", f"{len(text):,} bytes of JSON; at most 1 MiB")
        return text.encode("utf-8")

    def from_bytes(self, data: bytes) -> Any:
        return parse_json(data)


def _constant(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


def parse_json(data: bytes | str) -> Any:
    """The JSON value of a stored sample; ValueError for anything else (NaN, too deep...).

    >>> parse_json(b'{"id": 7}')
    {'id': 7}
    >>> parse_json(b"[" * 100000)
    Traceback (most recent call last):
    ...
    ValueError: nested too deep for JSON
    """
    try:
        return json.loads(data, parse_constant=_constant)
    except RecursionError:
        raise ValueError("nested too deep for JSON") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8: {e.reason}") from None
