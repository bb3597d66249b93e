"""Reading documents (a `.txt` file, one line of it, or a JSONL record's text field) under one
text policy (docs/format.md, docs/text.md): UTF-8, bad bytes rejected or U+FFFD, one
leading U+FEFF dropped, CRLF as LF, a line's terminator not part of it; nothing else changed."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from prep.run.errors import PrepError
from prep.run.inputs import os_reject_code, reject_record, walk

ERRORS = ("strict", "replace")
TEXT_EXTS = frozenset([".txt"])
JSONL_EXTS = frozenset([".jsonl", ".ndjson"])
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Piece:
    """A byte range of one input: one document ("file"), or the lines starting in it."""

    path: str
    rel: str  # the name written in rejects (posix, relative to SRC)
    start: int
    end: int
    mode: str

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def normalize(text: str) -> str:
    """The text policy after decoding.

    >>> normalize("\\ufeffa\\r\\nb\\rc\\n")
    'a\\nb\\rc\\n'
    """
    text = text.removeprefix("\ufeff")
    return text.replace("\r\n", "\n") if "\r" in text else text


def list_text(
    src: Path, split_lines: bool, stats: dict[str, os.stat_result] | None = None
) -> tuple[list[Piece], list[dict[str, Any]]]:
    """The inputs of SRC (a folder of `.txt`, a `.txt` or `.jsonl` file), rejects of unreadable;
    `stats`: filled with each input's stat by its rel (one stat a file)."""
    if not src.exists():
        raise PrepError(
            f"{src} does not exist. HINT: pass a folder of .txt files, a .txt or a .jsonl file"
        )
    line_mode = "lines" if split_lines else "file"
    stats = {} if stats is None else stats
    if src.is_file():
        ext = src.suffix.lower()
        if ext not in JSONL_EXTS | TEXT_EXTS:
            raise PrepError(
                f"{src} is not a .txt or .jsonl file. HINT: pass a folder of .txt files"
            )
        mode = "jsonl" if ext in JSONL_EXTS else line_mode
        st = stats[src.name] = src.stat()
        return [Piece(str(src), src.name, 0, st.st_size, mode)], []
    found: list[Piece] = []
    # the same checks and reject codes as prep pack's; the walk's stat is the file's size
    files, rejects = walk(src, TEXT_EXTS, stats)
    for rel, path in files:
        if not os.access(path, os.R_OK):  # planning reads line files: fail here, by name
            rejects.append(reject_record(rel, "unreadable", "cannot read: no read permission"))
            continue
        found.append(Piece(str(path), rel, 0, stats[rel].st_size, line_mode))
    found.sort(key=lambda p: p.rel)
    rejects.sort(key=lambda r: str(r["path"]))
    return found, rejects


def iter_lines(
    f: BinaryIO, start: int, end: int, max_bytes: int
) -> Iterator[tuple[int, int, bytes | None]]:
    """(offset, next offset, line) of each line starting in [start, end); too long: None."""
    f.seek(start)
    pos = start
    while pos < end:
        chunk = f.readline(max_bytes + 1)
        if not chunk:
            return
        nxt = pos + len(chunk)
        if chunk.endswith(b"\n") or len(chunk) <= max_bytes:
            yield pos, nxt, chunk.removesuffix(b"\n").removesuffix(b"\r")
        else:
            while chunk and not chunk.endswith(b"\n"):
                chunk = f.readline(_CHUNK)
                nxt += len(chunk)
            yield pos, nxt, None
        pos = nxt


def line_starts(path: str, size: int, step: int) -> list[int]:
    """Where a line file is cut for parallel work: each multiple of `step`, at a line start."""
    cuts = [0]
    with open(path, "rb") as f:
        target = step
        while target < size:
            # A line starts at target when the byte before it is LF: where the line there ends.
            _, pos, _ = next(iter_lines(f, target - 1, size, 0), (0, size, None))
            if pos >= size:
                break
            cuts.append(pos)
            target = max(target + step, pos + 1)
    return cuts


def count_documents(piece: Piece, limit: int, max_bytes: int) -> tuple[int, int]:
    """How many documents (up to `limit`) start in `piece`, and the offset just after the last."""
    if piece.mode == "file":
        return min(1, limit), piece.end
    n, cut = 0, piece.start
    with open(piece.path, "rb") as f:
        for _, nxt, line in iter_lines(f, piece.start, piece.end, max_bytes):
            if piece.mode == "jsonl" and line is not None and not line.strip():
                cut = nxt
                continue  # blank lines are not JSON records
            n, cut = n + 1, nxt
            if n == limit:
                break
    return n, cut


class DocumentReader:
    """Reads the documents of pieces, collecting one reject record per unusable document."""

    def __init__(self, text_field: str, errors: str, max_bytes: int):
        self.text_field = text_field
        self.errors = errors
        self.max_bytes = max_bytes
        self.rejects: list[dict[str, Any]] = []
        self.inputs = 0  # documents met, rejected ones included
        self._pos = 0  # where the line file being read is: the offset a read error names

    def _reject(self, rel: str, code: str, message: str) -> None:
        self.rejects.append(reject_record(rel, code, message))

    def _decode(self, data: bytes, rel: str, offset: int) -> str | None:
        try:
            return normalize(data.decode("utf-8", self.errors))
        except UnicodeDecodeError as e:
            hint = "HINT: re-encode the file as UTF-8, or pass --errors replace"
            self._reject(
                rel, "utf8", f"invalid UTF-8 at byte {offset + e.start} ({e.reason}). {hint}"
            )
            return None

    def _from_json(self, line: str, rel: str, offset: int) -> str | None:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            self._reject(rel, "json", f"line at byte {offset} is not JSON ({e.msg})")
            return None
        text = record.get(self.text_field) if isinstance(record, dict) else None
        where = f"line at byte {offset}"
        if not isinstance(text, str):
            why = f"{where} has no string field {self.text_field!r}"
            self._reject(rel, "no_text", f"{why}. HINT: --text-field NAME")
            return None
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate escape such as "\ud800"
            if self.errors == "strict":
                why = f"{where}: lone surrogate {text[e.start]!r} in {self.text_field!r}"
                self._reject(rel, "utf8", f"{why}. HINT: pass --errors replace")
                return None
            text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
        return normalize(text)

    def read(self, piece: Piece) -> Iterator[str]:
        """The documents of `piece`, in order; unusable ones are recorded and skipped."""
        self._pos = piece.start
        if piece.mode != "file":
            try:
                with open(piece.path, "rb") as f:
                    yield from self._lines(f, piece)
            except OSError as e:  # at open or mid-file: a read error, the rest of the range goes
                self.inputs += 1
                why = f"cannot read from byte {self._pos}: {e.strerror}"
                self._reject(piece.rel, os_reject_code(e), why)
            return
        self.inputs += 1
        if piece.nbytes > self.max_bytes:
            hint = "HINT: --split-lines, or raise --max-doc-mb"
            self._reject(
                piece.rel, "too_long", f"{piece.nbytes} bytes is over --max-doc-mb. {hint}"
            )
            return
        try:
            data = Path(piece.path).read_bytes()
        except OSError as e:  # vanished since it was listed, or an I/O error
            self._reject(piece.rel, os_reject_code(e), f"cannot read: {e.strerror}")
            return
        text = self._decode(data, piece.rel, 0)
        if text is not None:
            yield text

    def _lines(self, f: BinaryIO, piece: Piece) -> Iterator[str]:
        for offset, nxt, line in iter_lines(f, piece.start, piece.end, self.max_bytes):
            self._pos = nxt
            if piece.mode == "jsonl" and line is not None and not line.strip():
                continue
            self.inputs += 1
            if line is None:
                hint = "HINT: raise --max-doc-mb"
                self._reject(
                    piece.rel, "too_long", f"line at byte {offset} is over --max-doc-mb. {hint}"
                )
                continue
            text = self._decode(line, piece.rel, offset)
            if text is not None and piece.mode == "jsonl":
                text = self._from_json(text, piece.rel, offset)
            if text is not None:
                yield text
