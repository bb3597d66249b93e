"""Text in, token ids out: reading documents under one text policy, and the tokenizers.

What a document's text is (decoding its tokens gives back exactly this string):

- a whole `.txt` file, one line of it (`--split-lines`), or one JSONL record's text field;
- decoded as UTF-8: invalid bytes reject the document (errors="strict", the default) or become
  U+FFFD (errors="replace"); lone surrogates in a JSON string are treated the same way;
- one leading U+FEFF (a byte order mark) dropped;
- CRLF turned into LF (a lone CR is kept); a line's own terminator is not part of the line;
- nothing else changed: no Unicode normalisation, no stripping; an empty document is kept.

Tokenizers share one small interface (`Tokenizer`) and are found in one table (`TOKENIZERS`);
a path to a Hugging Face `tokenizer.json` is used as it is. Nothing is downloaded.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from loaders.format import atomic_write_text, fsync_dir
from prep import PrepError
from prep.sources import os_reject_code, reject_record, walk

EOT = "<|endoftext|>"
# End-of-document tokens looked up, in this order, in a tokenizer.json the user brings.
EOT_CANDIDATES = (EOT, "<|end_of_text|>", "</s>", "<eos>", "[EOS]")
ERRORS = ("strict", "replace")
MODES = ("file", "lines", "jsonl")  # one document per file, per line, per JSON line
TEXT_EXTS = frozenset([".txt"])
JSONL_EXTS = frozenset([".jsonl", ".ndjson"])
_CHUNK = 1 << 20

# ---------------------------------------------------------------- documents


@dataclass(frozen=True)
class Piece:
    """A byte range [start, end) of one input: one document (mode "file"), or every line (or
    JSON line) that starts inside it. Ranges of line files begin at line starts."""

    path: str
    rel: str  # the name written in rejects (posix, relative to SRC)
    start: int
    end: int
    mode: str

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def normalize(text: str) -> str:
    """The document text policy after decoding: drop one leading BOM, CRLF -> LF.

    >>> normalize("\\ufeffa\\r\\nb\\rc\\n")
    'a\\nb\\rc\\n'
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n") if "\r" in text else text


def list_text(src: Path, split_lines: bool) -> tuple[list[Piece], list[dict[str, Any]]]:
    """The inputs of SRC in a fixed order: a folder (its `.txt` files, sorted by relative path,
    hidden names skipped), one `.txt` file, or one `.jsonl` file. Rejects for unreadable files."""
    if not src.exists():
        raise PrepError(
            f"{src} does not exist. HINT: pass a folder of .txt files, a .txt or a .jsonl file"
        )
    line_mode = "lines" if split_lines else "file"
    if src.is_file():
        ext = src.suffix.lower()
        if ext in JSONL_EXTS:
            return [Piece(str(src), src.name, 0, src.stat().st_size, "jsonl")], []
        if ext in TEXT_EXTS:
            return [Piece(str(src), src.name, 0, src.stat().st_size, line_mode)], []
        raise PrepError(f"{src} is not a .txt or .jsonl file. HINT: pass a folder of .txt files")
    found: list[Piece] = []
    files, rejects = walk(src, TEXT_EXTS)  # the same checks and reject codes as prep pack's
    for rel, path in files:
        if not os.access(path, os.R_OK):  # planning reads line files: fail here, by name
            rejects.append(reject_record(rel, "unreadable", "cannot read: no read permission"))
            continue
        try:
            size = path.stat().st_size
        except OSError as e:  # gone since it was listed
            rejects.append(reject_record(rel, os_reject_code(e), f"cannot stat: {e.strerror}"))
            continue
        found.append(Piece(str(path), rel, 0, size, line_mode))
    found.sort(key=lambda p: p.rel)
    rejects.sort(key=lambda r: str(r["path"]))
    return found, rejects


def iter_lines(
    f: BinaryIO, start: int, end: int, max_bytes: int
) -> Iterator[tuple[int, int, bytes | None]]:
    """(offset, next offset, line) for each line starting in [start, end), without its LF/CRLF.

    A line longer than max_bytes comes back as None after being skipped in 1 MB reads, so memory
    stays bounded by max_bytes whatever the file holds."""
    f.seek(start)
    pos = start
    while pos < end:
        chunk = f.readline(max_bytes + 1)
        if not chunk:
            return
        if chunk.endswith(b"\n") or len(chunk) <= max_bytes:
            nxt = pos + len(chunk)
            line = chunk[:-1] if chunk.endswith(b"\n") else chunk
            yield pos, nxt, line[:-1] if line.endswith(b"\r") else line
        else:
            nxt = pos + len(chunk)
            while not chunk.endswith(b"\n"):
                chunk = f.readline(_CHUNK)
                if not chunk:
                    break
                nxt += len(chunk)
            yield pos, nxt, None
        pos = nxt


def line_starts(path: str, size: int, step: int) -> list[int]:
    """Offsets near every multiple of `step` moved forward to the next line start: where a line
    file is cut for parallel work. Depends only on the bytes and `step`."""
    cuts = [0]
    with open(path, "rb") as f:
        target = step
        while target < size:
            f.seek(target - 1)  # a line starts at target when the byte before it is LF
            pos = target - 1
            while True:
                block = f.read(_CHUNK)
                if not block:
                    pos = size
                    break
                hit = block.find(b"\n")
                if hit >= 0:
                    pos += hit + 1
                    break
                pos += len(block)
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
            self._reject(
                rel,
                "utf8",
                f"invalid UTF-8 at byte {offset + e.start} ({e.reason}). HINT: re-encode the "
                "file as UTF-8, or pass --errors replace",
            )
            return None

    def _from_json(self, line: str, rel: str, offset: int) -> str | None:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            self._reject(rel, "json", f"line at byte {offset} is not JSON ({e.msg})")
            return None
        text = record.get(self.text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            self._reject(
                rel,
                "no_text",
                f"line at byte {offset} has no string field {self.text_field!r}. "
                "HINT: --text-field NAME",
            )
            return None
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate escape such as "\ud800"
            if self.errors == "strict":
                self._reject(
                    rel,
                    "utf8",
                    f"line at byte {offset}: lone surrogate {text[e.start]!r} in "
                    f"{self.text_field!r}. HINT: pass --errors replace",
                )
                return None
            text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
        return normalize(text)

    def read(self, piece: Piece) -> Iterator[str]:
        """The documents of `piece`, in order; unusable ones are recorded and skipped."""
        if piece.mode == "file":
            self.inputs += 1
            if piece.nbytes > self.max_bytes:
                self._reject(
                    piece.rel,
                    "too_long",
                    f"{piece.nbytes} bytes is over --max-doc-mb. HINT: --split-lines, or raise "
                    "--max-doc-mb",
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
            return
        self._pos = piece.start
        try:
            with open(piece.path, "rb") as f:
                yield from self._lines(f, piece)
        except OSError as e:  # at open or mid-file: a read error, the rest of the range goes
            self.inputs += 1
            self._reject(
                piece.rel, os_reject_code(e), f"cannot read from byte {self._pos}: {e.strerror}"
            )

    def _lines(self, f: BinaryIO, piece: Piece) -> Iterator[str]:
        for offset, nxt, line in iter_lines(f, piece.start, piece.end, self.max_bytes):
            self._pos = nxt
            if piece.mode == "jsonl" and line is not None and not line.strip():
                continue
            self.inputs += 1
            if line is None:
                self._reject(
                    piece.rel,
                    "too_long",
                    f"line at byte {offset} is over --max-doc-mb. HINT: raise --max-doc-mb",
                )
                continue
            text = self._decode(line, piece.rel, offset)
            if text is not None and piece.mode == "jsonl":
                text = self._from_json(text, piece.rel, offset)
            if text is not None:
                yield text


# ---------------------------------------------------------------- tokenizers


def with_eot(
    ids: np.ndarray, lengths: np.ndarray, eot: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Put `eot` after every document of a flat run of ids; lengths then count it.

    >>> ids, n = with_eot(np.array([5, 6, 7]), np.array([2, 0, 1]), 9)
    >>> ids.tolist(), n.tolist()
    ([5, 6, 9, 9, 7, 9], [3, 1, 2])
    """
    if eot is None:
        return ids, lengths
    return np.insert(ids, np.cumsum(lengths), eot), lengths + 1


class Tokenizer(ABC):
    """Documents in, one flat run of ids out. `vocab_size` is the largest id + 1."""

    name: str
    file: str | None  # its file inside the dataset folder (None: nothing to store)
    vocab_size: int
    eot_id: int | None  # put after every document; None: the offsets alone mark documents

    @abstractmethod
    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of all `texts` back to back, each document followed by `eot_id` when there
        is one, and the length of each document (its eot included)."""

    @abstractmethod
    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """The text of `ids`; the end-of-document id is dropped."""

    @abstractmethod
    def save(self, folder: Path) -> None:
        """Write the tokenizer file into `folder` (atomically)."""


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes: 256 ids, uint8, no end-of-document token (offsets mark documents)."""

    name, file, vocab_size, eot_id = "bytes", None, 256, None

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        data = [t.encode("utf-8") for t in texts]
        lengths = np.fromiter(map(len, data), np.int64, len(data))
        return np.frombuffer(b"".join(data), np.uint8), lengths

    def save(self, folder: Path) -> None:
        return None  # nothing to store: UTF-8 defines it

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        arr = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError("byte ids must be 0..255")
        # A window may cut a character in two: its bytes read as U+FFFD rather than raise.
        return arr.astype(np.uint8).tobytes().decode("utf-8", "replace")


class CharTokenizer(Tokenizer):
    """One id per character seen in the corpus (sorted by code point), then the eot id."""

    name, file = "char", "chars.json"

    def __init__(self, chars: str):
        self.chars = chars
        self.vocab_size = len(chars) + 1
        self.eot_id = len(chars)
        points = np.frombuffer(chars.encode("utf-32-le"), np.uint32)
        # A dense code point -> id table: at most 0x110000 int32, 4.4 MB.
        self._table = np.full(int(points.max()) + 1 if points.size else 1, -1, np.int32)
        self._table[points] = np.arange(len(points), dtype=np.int32)
        self._points = points

    @classmethod
    def fit(cls, corpus: Iterable[str]) -> CharTokenizer:
        seen: set[str] = set()
        for text in corpus:
            seen.update(text)
        return cls("".join(sorted(seen)))

    @classmethod
    def load(cls, path: Path) -> CharTokenizer:
        return cls("".join(json.loads(path.read_text(encoding="utf-8"))["chars"]))

    def save(self, folder: Path) -> None:
        data = {"kind": "char", "chars": list(self.chars), "eot_id": self.eot_id}
        atomic_write_text(folder / str(self.file), json.dumps(data, ensure_ascii=False) + "\n")

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        points = np.frombuffer("".join(texts).encode("utf-32-le"), np.uint32)
        known = points < len(self._table)
        ids = self._table[np.where(known, points, 0)]
        bad = ~known | (ids < 0)
        if bad.any():
            ch = chr(int(points[np.argmax(bad)]))
            raise ValueError(f"character {ch!r} (U+{ord(ch):04X}) is not in the char vocabulary")
        lengths = np.fromiter(map(len, texts), np.int64, len(texts))
        return with_eot(ids, lengths, self.eot_id)

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        arr = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), dtype=np.int64)
        arr = arr[arr != self.eot_id]
        return self._points[arr].astype("<u4").tobytes().decode("utf-32-le")


class HFTokenizer(Tokenizer):
    """A Hugging Face `tokenizers` tokenizer: our byte-level BPE, or a tokenizer.json brought by
    the user. Special-token strings inside the text are encoded as plain text, so only the eot
    id we add marks a document's end."""

    file = "tokenizer.json"

    def __init__(self, tok: Any, name: str, source: Path | None = None):
        self.name = name
        self.source = source  # the user's file, copied byte for byte by save()
        tok.encode_special_tokens = True
        self._tok = tok
        vocab = tok.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values(), default=-1) + 1
        self.eot_id = next((vocab[t] for t in EOT_CANDIDATES if t in vocab), None)

    @classmethod
    def load(cls, path: Path, name: str) -> HFTokenizer:
        from tokenizers import Tokenizer as HF

        try:
            return cls(HF.from_file(str(path)), name, path if name == JSON_NAME else None)
        except Exception as e:  # tokenizers raises a bare Exception for a bad file
            raise PrepError(
                f"{path}: not a tokenizers JSON file ({e}). HINT: pass the tokenizer.json "
                "saved by Hugging Face tokenizers (e.g. GPT-2's)"
            ) from e

    def save(self, folder: Path) -> None:
        tmp = folder / f".{self.file}.tmp"
        if self.source is not None:
            shutil.copyfile(self.source, tmp)
        else:
            self._tok.save(str(tmp))
        os.replace(tmp, folder / str(self.file))
        fsync_dir(folder)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        runs = [e.ids for e in self._tok.encode_batch_fast(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, runs), np.int64, len(runs))
        ids = np.fromiter(itertools.chain.from_iterable(runs), np.int64, int(lengths.sum()))
        return with_eot(ids, lengths, self.eot_id)

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        arr = ids.tolist() if isinstance(ids, np.ndarray) else [int(i) for i in ids]
        return str(self._tok.decode(arr, skip_special_tokens=True))


def _fit_bpe(corpus: Callable[[], Iterable[str]], vocab_size: int) -> HFTokenizer:
    from tokenizers import Tokenizer as HF
    from tokenizers import decoders, models, pre_tokenizers, trainers

    check_tokenizer("bpe", vocab_size)
    tok = HF(models.BPE())
    # Byte-level: every string is encodable (all 256 bytes are in the vocabulary) and decodes
    # back exactly; no normaliser, so nothing is changed before encoding.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return HFTokenizer(tok, "bpe")


def _need(path: Path | None) -> Path:
    if path is None:
        raise PrepError("this tokenizer needs its file. HINT: the dataset is incomplete; repack")
    return path


@dataclass(frozen=True)
class TokenizerKind:
    about: str
    file: str | None  # the name of its file inside the dataset folder
    # (corpus, vocab size) -> tokenizer; the corpus is a callable so that kinds that need no
    # corpus never read it.
    fit: Callable[[Callable[[], Iterable[str]], int], Tokenizer]
    load: Callable[[Path | None], Tokenizer]  # from its file (None: the kind has no file)


TOKENIZERS: dict[str, TokenizerKind] = {
    "bytes": TokenizerKind(
        "UTF-8 bytes, vocabulary 256, uint8",
        ByteTokenizer.file,
        lambda c, n: ByteTokenizer(),
        lambda p: ByteTokenizer(),
    ),
    "char": TokenizerKind(
        "the characters of the corpus + end-of-document",
        CharTokenizer.file,
        lambda c, n: CharTokenizer.fit(c()),
        lambda p: CharTokenizer.load(_need(p)),
    ),
    "bpe": TokenizerKind(
        "byte-level BPE trained on the corpus (--vocab-size)",
        HFTokenizer.file,
        _fit_bpe,
        lambda p: HFTokenizer.load(_need(p), "bpe"),
    ),
}
JSON_NAME = "json"  # the manifest's name for a tokenizer.json the user brought


def tokenizer_identity(spec: str) -> tuple[str, str | None]:
    """(name in the manifest, file in the dataset folder) of the tokenizer `spec` names."""
    check_tokenizer(spec)
    if spec in TOKENIZERS:
        return spec, TOKENIZERS[spec].file
    return JSON_NAME, HFTokenizer.file


def check_tokenizer(spec: str, vocab_size: int | None = None) -> None:
    """Fail early on a tokenizer that is neither a registered name nor an existing .json file,
    and on a bpe vocabulary too small for the 256 bytes and the end-of-document token."""
    if spec == "bpe" and vocab_size is not None and vocab_size < 257:
        raise PrepError(
            f"--vocab-size {vocab_size} is too small for bpe: it needs the 256 bytes and the "
            "end-of-document token. HINT: --vocab-size 512 or more"
        )
    if spec in TOKENIZERS:
        return
    if spec.endswith(".json"):
        if not Path(spec).is_file():
            raise PrepError(f"tokenizer file {spec} does not exist. HINT: check the path")
        return
    raise PrepError(
        f"unknown tokenizer {spec!r}. HINT: one of {', '.join(TOKENIZERS)}, or a path to a "
        "tokenizer.json"
    )


def fit_tokenizer(spec: str, corpus: Callable[[], Iterable[str]], vocab_size: int) -> Tokenizer:
    """The tokenizer `spec` names: built from the corpus where it needs one, or read from the
    user's tokenizer.json."""
    check_tokenizer(spec)
    if spec in TOKENIZERS:
        return TOKENIZERS[spec].fit(corpus, vocab_size)
    return HFTokenizer.load(Path(spec), JSON_NAME)


def load_saved(name: str, folder: Path, file: str | None) -> Tokenizer:
    """A tokenizer saved by `Tokenizer.save` in `folder` under `file`."""
    path = folder / file if file else None
    if name == JSON_NAME:
        return HFTokenizer.load(_need(path), JSON_NAME)
    if name not in TOKENIZERS:
        raise PrepError(f"{folder}: unknown tokenizer {name!r}. HINT: repack with this prep")
    return TOKENIZERS[name].load(path)


def load_tokenizer(root: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer of a token dataset folder, to decode its ids.

    >>> tok = load_tokenizer("data/demo-tokens")  # doctest: +SKIP
    >>> tok.decode(DocumentDataset("data/demo-tokens", split="val")[0])  # doctest: +SKIP
    """
    from loaders.format import FormatError, read_manifest

    root = Path(root)
    m = read_manifest(root)
    if m.kind != "tokens":
        raise FormatError(f"{root} holds {m.kind}, not tokens")
    t = m.extra["tokenizer"]
    return load_saved(t["name"], root, t["file"])
