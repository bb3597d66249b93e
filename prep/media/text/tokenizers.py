"""Tokenizers, in one table (`TOKENIZERS`), of one interface: classmethods `fit(corpus, vocab_size)`
(corpus a callable) and `load(path)` (None: no file); `encode(texts)`: all ids back to back, each
document ended by `eot_id` unless None, and each length; `decode(ids)`, eot dropped;
`save(folder)`: its `file`, atomically. `vocab_size` is the largest id + 1."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from prep.run.errors import PrepError, UsageError
from prep.run.files import atomic_write_text

EOT = "<|endoftext|>"
# End-of-document tokens looked up, in order, in a tokenizer.json the user brings
EOT_CANDIDATES = (EOT, "<|end_of_text|>", "</s>", "<eos>", "[EOS]")
# The largest --vocab-size, 64x the largest in use: the bpe trainer reserves ~2 bytes an id
MAX_VOCAB = 1 << 24


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


def _ids(ids: Iterable[int] | np.ndarray) -> np.ndarray:
    return np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), dtype=np.int64)


def _need(path: Path | None) -> Path:
    if path is None:
        raise PrepError("this tokenizer needs its file. HINT: the dataset is incomplete; repack")
    return path


class ByteTokenizer:
    """UTF-8 bytes: 256 ids, uint8, no end-of-document token (offsets mark documents)."""

    name, file, vocab_size, eot_id = "bytes", None, 256, None

    @classmethod
    def fit(cls, corpus: Callable[[], Iterable[str]], vocab_size: int) -> ByteTokenizer:
        return cls()

    @classmethod
    def load(cls, path: Path | None) -> ByteTokenizer:
        return cls()

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        data = [t.encode("utf-8") for t in texts]
        lengths = np.fromiter(map(len, data), np.int64, len(data))
        return np.frombuffer(b"".join(data), np.uint8), lengths

    def save(self, folder: Path) -> None:
        return None  # nothing to store: UTF-8 defines it

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        arr = _ids(ids)
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError("byte ids must be 0..255")
        # A window may cut a character in two: its bytes read as U+FFFD rather than raise.
        return arr.astype(np.uint8).tobytes().decode("utf-8", "replace")


class CharTokenizer:
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
    def fit(cls, corpus: Callable[[], Iterable[str]], vocab_size: int) -> CharTokenizer:
        return cls("".join(sorted(set(itertools.chain.from_iterable(corpus())))))

    @classmethod
    def load(cls, path: Path | None) -> CharTokenizer:
        return cls("".join(json.loads(_need(path).read_text(encoding="utf-8"))["chars"]))

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
        arr = _ids(ids)
        arr = arr[arr != self.eot_id]
        return self._points[arr].astype("<u4").tobytes().decode("utf-32-le")


class HFTokenizer:
    """A Hugging Face tokenizer: our byte-level BPE or the user's; special tokens as text."""

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
    def fit(cls, corpus: Callable[[], Iterable[str]], vocab_size: int) -> HFTokenizer:
        """Byte-level BPE, no normaliser: every string encodes, and decodes back exactly."""
        from tokenizers import Tokenizer as HF
        from tokenizers import decoders, models, pre_tokenizers, trainers

        tok = HF(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOT],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(corpus(), trainer=trainer)
        return cls(tok, "bpe")

    @classmethod
    def load(cls, path: Path | None, name: str = "bpe") -> HFTokenizer:
        from tokenizers import Tokenizer as HF

        path = _need(path)
        try:
            return cls(HF.from_file(str(path)), name, path if name == JSON_NAME else None)
        except Exception as e:  # tokenizers raises a bare Exception for a bad file
            raise PrepError(
                f"{path}: not a tokenizers JSON file ({e}). HINT: pass the tokenizer.json "
                "saved by Hugging Face tokenizers (e.g. GPT-2's)"
            ) from e

    def save(self, folder: Path) -> None:
        # Not tokenizers' save(): it neither fsyncs nor names the file on a full disk.
        source = self.source  # the user's file, copied byte for byte
        text = self._tok.to_str(pretty=True) if source is None else source.read_bytes().decode()
        atomic_write_text(folder / str(self.file), text)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encoded = self._tok.encode_batch_fast(texts, add_special_tokens=False)
        runs = [np.array(e.ids, np.int64) for e in encoded]  # (a third faster than one fromiter)
        lengths = np.fromiter(map(len, runs), np.int64, len(runs))
        ids = np.concatenate(runs) if runs else np.empty(0, np.int64)
        return with_eot(ids, lengths, self.eot_id)

    def encode_marked(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """As encode, but a special token written in the text is its id: a chat template's
        markers (<|im_start|>) are the tokens the model knows them as, not their characters."""
        self._tok.encode_special_tokens = False
        try:
            return self.encode(texts)
        finally:
            self._tok.encode_special_tokens = True

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        arr = ids.tolist() if isinstance(ids, np.ndarray) else [int(i) for i in ids]
        return str(self._tok.decode(arr, skip_special_tokens=True))


Tokenizer = ByteTokenizer | CharTokenizer | HFTokenizer
TOKENIZERS: dict[str, type[Tokenizer]] = {
    "bytes": ByteTokenizer,  # UTF-8 bytes, vocabulary 256, uint8
    "char": CharTokenizer,  # the characters of the corpus + end-of-document
    "bpe": HFTokenizer,  # byte-level BPE trained on the corpus (--vocab-size)
}
JSON_NAME = "json"  # the manifest's name for a tokenizer.json the user brought


def tokenizer_identity(spec: str) -> tuple[str, str | None]:
    """(name in the manifest, file in the dataset folder) of the checked tokenizer `spec`."""
    if spec in TOKENIZERS:
        return spec, TOKENIZERS[spec].file
    return JSON_NAME, HFTokenizer.file


def check_tokenizer(spec: str, vocab_size: int | None = None) -> None:
    """Fail early on an unknown tokenizer or missing .json, or bpe's vocabulary out of range."""
    if spec == "bpe" and vocab_size is not None and not 257 <= vocab_size <= MAX_VOCAB:
        raise UsageError(
            f"--vocab-size {vocab_size} is outside 257..{MAX_VOCAB:,} for bpe: 256 bytes and "
            "the end-of-document token at least, 2**24 (far above any vocabulary in use) at "
            "most. HINT: --vocab-size 8192 (GPT-2 has 50257)"
        )
    if spec.endswith(".json") and not Path(spec).is_file():
        raise PrepError(f"tokenizer file {spec} does not exist. HINT: check the path")
    if spec not in TOKENIZERS and not spec.endswith(".json"):
        raise UsageError(
            f"unknown tokenizer {spec!r}. HINT: one of {', '.join(TOKENIZERS)}, or a path to a "
            "tokenizer.json"
        )


def fit_tokenizer(spec: str, corpus: Callable[[], Iterable[str]], vocab_size: int) -> Tokenizer:
    """The tokenizer `spec` names: built from the corpus, or the user's tokenizer.json."""
    check_tokenizer(spec, vocab_size)
    if spec in TOKENIZERS:
        return TOKENIZERS[spec].fit(corpus, vocab_size)
    return HFTokenizer.load(Path(spec), JSON_NAME)


def load_saved(name: str, folder: Path, file: str | None) -> Tokenizer:
    """A tokenizer saved by `Tokenizer.save` in `folder` under `file`."""
    path = folder / file if file else None
    if name == JSON_NAME:
        return HFTokenizer.load(path, JSON_NAME)
    if name not in TOKENIZERS:
        raise PrepError(f"{folder}: unknown tokenizer {name!r}. HINT: repack with this prep")
    return TOKENIZERS[name].load(path)


def load_tokenizer(root: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer of a token dataset (a folder, or a URL: its file fetched and checked).

    >>> tok = load_tokenizer("data/demo-tokens")  # doctest: +SKIP
    >>> tok.decode(DocumentDataset("data/demo-tokens", split="val")[0])  # doctest: +SKIP
    """
    from loaders.fields import Tokens, declared
    from loaders.format import FormatError
    from loaders.remote import dataset_file

    m, local = dataset_file(root)
    t = declared(m).get("tokens")
    if not isinstance(t, Tokens) or t.tokenizer_name is None:
        raise FormatError(f"{root} has no token stream of prep tokenize's (no tokenizer)")
    file = t.tokenizer
    path = local(file, t.tokenizer_sha256 or "") if file else Path(os.devnull)  # bytes: no file
    return load_saved(t.tokenizer_name, path.parent, path.name if file else None)
