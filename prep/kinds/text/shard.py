"""The shard task of prep tokenize, run by the workers: a shard's pieces read in batches (the next
read on a thread), tokenized, split train/val by each document's hash, and written as each
split's tokens, ragged by document, with each document's `source` (and --chat's loss mask)."""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields.base import encode_source
from loaders.fields.tokens import LOSS_MASK
from loaders.format import ArraySpec
from loaders.format.index import stem
from prep.kinds.text.config import TokenizeConfig
from prep.media.text.chat import ChatReader, encode_chats, template_text
from prep.media.text.documents import DocumentReader, Piece
from prep.media.text.tokenizers import Tokenizer, load_saved
from prep.run.errors import PrepError
from prep.run.files import RaggedWriter
from prep.run.profile import stage, timed_iter
from prep.run.shardwriter import ShardFiles, shard_task, split_record, writing

SPLITS = ("train", "val")
# One encode call per batch: big enough for tokenizers' own threads, small enough for memory.
BATCH_BYTES = 4 << 20
BATCH_DOCS = 4096
MB = 1 << 20
Batch = tuple[list[str], list[str]]  # (texts, the file each came from)


def fit_ids(ids: np.ndarray, dtype: str, where: str) -> np.ndarray:
    """`ids` as `dtype`, checked: an id the dtype cannot hold is an error, never a wrap-around."""
    top = np.iinfo(dtype).max
    if ids.size and not np.can_cast(ids.dtype, dtype, "safe"):
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi > top:
            bad = hi if hi > top else lo
            raise PrepError(
                f"{where}: token id {bad} does not fit {dtype} (0..{top}). HINT: the tokenizer "
                "returned an id outside its vocabulary; check its tokenizer.json"
            )
    return ids.astype(dtype, copy=False)


def is_val(text: str, val_fraction: float) -> bool:
    """Whether a document is in "val", by its text alone (docs/format.md: BLAKE2b-64)."""
    if val_fraction <= 0:
        return False
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") < int(val_fraction * 2**64)


class SplitWriter(ShardFiles):
    """One split's shard of one task: tokens, ragged by document, and each document's source
    file, held as runs (a file's documents are consecutive) and written in close()."""

    def __init__(self, staging: Path, split: str, index: int):
        super().__init__(staging, stem(split, index))
        self.split = split
        self.runs: list[tuple[str, int]] = []  # (file, documents in a row)
        self.docs = 0

    def open(self, dtype: str, chat: bool) -> None:
        self.tokens = self.ragged("tokens", dtype)
        self.mask = self.ragged(LOSS_MASK, "uint8") if chat else None

    def add(
        self, ids: np.ndarray, lengths: np.ndarray, sources: list[str], mask: np.ndarray | None
    ) -> None:
        self.tokens.extend(ids, lengths)
        if self.mask is not None and mask is not None:
            self.mask.extend(mask, lengths)
        for name in sources:
            if self.runs and self.runs[-1][0] == name:
                self.runs[-1] = (name, self.runs[-1][1] + 1)
            else:
                self.runs.append((name, 1))
        self.docs += len(lengths)

    def close(self) -> None:
        """Finish the temp files (header, fsync); a split with no documents keeps none."""
        if self.docs == 0:
            self.abort()
            return
        source = self.ragged("source", "uint8")
        paths: list[bytes] = []  # a document's path each, written 1 << 16 at a time
        for name, n in self.runs:
            path = encode_source(name).tobytes()
            while n:  # bounded memory for a file of many lines
                k = min(n, (1 << 16) - len(paths))
                paths.extend([path] * k)
                n -= k
                if len(paths) == 1 << 16:
                    _sources(source, paths)
        _sources(source, paths)
        super().close()


def _sources(source: RaggedWriter, paths: list[bytes]) -> None:
    """`paths` as samples of `source` in one write each (then none held)."""
    if paths:
        lengths = np.fromiter(map(len, paths), np.int64, len(paths))
        source.extend(np.frombuffer(b"".join(paths), np.uint8), lengths)
        paths.clear()


def _batches(reader: DocumentReader, pieces: list[Piece]) -> Iterator[Batch]:
    """Batches of about BATCH_BYTES of text."""
    texts: list[str] = []
    names: list[str] = []
    size = 0
    for p in pieces:
        for text in reader.read(p):
            texts.append(text)
            names.append(p.rel)
            size += len(text)
            if size >= BATCH_BYTES or len(texts) >= BATCH_DOCS:
                yield texts, names
                texts, names, size = [], [], 0
    if texts:
        yield texts, names


def read_ahead(batches: Iterator[Batch]) -> Iterator[Batch]:
    """`batches`, the next one read on a thread while the caller encodes this one (the tokenizer
    releases the GIL); a reading error is raised here, in order."""
    with ThreadPoolExecutor(1, thread_name_prefix="prep-read-ahead") as pool:
        ahead = pool.submit(next, batches, None)
        while True:
            # A timeout: a task stopped by the run (Ctrl-C) is not left waiting here.
            while not wait([ahead], timeout=0.1).done:
                pass
            batch = ahead.result()
            if batch is None:
                return
            ahead = pool.submit(next, batches, None)
            yield batch


@functools.lru_cache(maxsize=2)
def _load_tokenizer(name: str, folder: Path, file: str | None, sha: str) -> Tokenizer:
    """Once per process and file (`sha` tells a changed one apart): workers run many shards."""
    return load_saved(name, folder, file)


@shard_task
def tokenize_shard(
    index: int,
    pieces: list[Piece],
    cfg: TokenizeConfig,
    tok_name: str,
    tok_file: str | None,
    tok_sha: str,
    dtype: str,
    staging: Path,
    threads: bool,
    specs: dict[str, ArraySpec],
) -> dict[str, Any]:
    """Tokenize `pieces` into shard `index` of each split; its record. Memory holds a batch.
    `specs`: the arrays, as --compress marks them."""
    if not threads:  # one task per core already; read by tokenizers at every call
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    tok = _load_tokenizer(tok_name, staging, tok_file, tok_sha)
    reader = document_reader(cfg)
    writers = {s: SplitWriter(staging, s, index) for s in SPLITS}
    for w in writers.values():
        w.specs = specs
    with writing(writers.values()):
        with stage("write"):
            for w in writers.values():
                w.open(dtype, cfg.chat)
        for texts, names in timed_iter("read", read_ahead(_batches(reader, pieces))):
            files = list(dict.fromkeys(names))  # each file once, in order
            where = ", ".join(files[:3]) + (" ..." if len(files) > 3 else "")
            try:
                with stage("tokenize"):
                    ids, lengths, mask = (
                        encode_chats(tok, texts) if cfg.chat else (*tok.encode(texts), None)
                    )
            except ValueError as e:
                raise PrepError(
                    f"{where}: {e}. HINT: the inputs changed during the run; rerun with --overwrite"
                ) from e
            ids = fit_ids(ids, dtype, where)
            val = np.fromiter((is_val(t, cfg.val_fraction) for t in texts), bool, len(texts))
            with stage("write"):
                if val.any():
                    in_val = np.repeat(val, lengths)
                    sources = np.asarray(names, dtype=object)
                    masks = (None, None) if mask is None else (mask[in_val], mask[~in_val])
                    writers["val"].add(ids[in_val], lengths[val], list(sources[val]), masks[0])
                    writers["train"].add(ids[~in_val], lengths[~val], list(sources[~val]), masks[1])
                else:
                    writers["train"].add(ids, lengths, names, mask)
    done = [w.publish(w.docs, w.split) for w in writers.values() if w.docs]
    more = {"tokenizer_sha256": tok_sha, "inputs": reader.inputs}
    return split_record(staging, index, done, reader.rejects, **more)


def document_reader(cfg: TokenizeConfig) -> DocumentReader:
    """The documents of the inputs: texts, or with --chat chats as their segments (chat.py)."""
    if cfg.chat:
        return ChatReader(
            template_text(cfg.chat_template, cfg.tokenizer), cfg.errors, int(cfg.max_doc_mb * MB)
        )
    return DocumentReader(cfg.text_field, cfg.errors, int(cfg.max_doc_mb * MB))
