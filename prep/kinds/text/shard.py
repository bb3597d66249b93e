"""The tokenize shard task: documents in, each split's tokens (ragged by document) out."""

from __future__ import annotations

import functools
import hashlib
import os
import queue
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields.base import encode_source
from loaders.format import Shard
from loaders.format.index import stem
from prep.kinds.text.config import TokenizeConfig
from prep.media.text.documents import DocumentReader, Piece
from prep.media.text.tokenizers import Tokenizer, load_saved
from prep.run.errors import PrepError
from prep.run.files import writing
from prep.run.profile import stage, timed_iter
from prep.run.shardwriter import ShardFiles, shard_task, split_record

SPLITS = ("train", "val")
# One encode call per batch: big enough for tokenizers' own threads, small enough for memory.
BATCH_BYTES = 4 << 20
BATCH_DOCS = 4096
MB = 1 << 20


def fit_ids(ids: np.ndarray, dtype: str, where: str) -> np.ndarray:
    """`ids` as `dtype`, checked: an id the dtype cannot hold is an error, never a wrap-around."""
    target = np.dtype(dtype)
    if np.can_cast(ids.dtype, target, "safe"):
        return ids.astype(target, copy=False)
    top = np.iinfo(target).max
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi > top:
            bad = hi if hi > top else lo
            raise PrepError(
                f"{where}: token id {bad} does not fit {dtype} (0..{top}). HINT: the tokenizer "
                "returned an id outside its vocabulary; check its tokenizer.json"
            )
    return ids.astype(target)


def is_val(text: str, val_fraction: float) -> bool:
    """Whether a document is in "val", by its text alone (FORMAT.md: BLAKE2b-64)."""
    if val_fraction <= 0:
        return False
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") < int(val_fraction * 2**64)


class SplitWriter:
    """One split's shard of one task: tokens, ragged by document, and each document's source
    file, held as runs (a file's documents are consecutive) and written in close()."""

    def __init__(self, staging: Path, split: str, index: int):
        self.split = split
        self.files = ShardFiles(staging, stem(split, index))
        self.runs: list[tuple[str, int]] = []  # (file, documents in a row)
        self.docs = 0

    def open(self, dtype: str) -> None:
        self.tokens = self.files.ragged("tokens", dtype)

    def add(self, ids: np.ndarray, lengths: np.ndarray, sources: list[str]) -> None:
        self.tokens.extend(ids, lengths)
        for name in sources:
            if self.runs and self.runs[-1][0] == name:
                self.runs[-1] = (name, self.runs[-1][1] + 1)
            else:
                self.runs.append((name, 1))
        self.docs += len(lengths)

    def abort(self) -> None:
        self.files.abort()

    def close(self) -> None:
        """Finish the temp files (header, fsync); a split with no documents keeps none."""
        if self.docs == 0:
            self.abort()
            return
        source = self.files.ragged("source", "uint8")
        for name, n in self.runs:
            path = encode_source(name)
            for start in range(0, n, 1 << 16):  # bounded memory for a file of many lines
                k = min(n - start, 1 << 16)
                source.extend(np.tile(path, k), np.full(k, len(path)))
        self.files.close()

    def publish(self) -> Shard | None:
        return self.files.publish(self.docs, self.split) if self.docs else None


def _batches(reader: DocumentReader, pieces: list[Piece]) -> Iterator[tuple[list[str], list[str]]]:
    """(texts, the file each came from), about BATCH_BYTES of text at a time."""
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


def read_ahead(
    batches: Iterator[tuple[list[str], list[str]]],
) -> Generator[tuple[list[str], list[str]], None, None]:
    """`batches`, the next one read on a thread while the caller encodes this one (the tokenizer
    releases the GIL); a reading error is raised here, in order."""
    ready: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def offer(message: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                ready.put(message, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in batches:
                if not offer(("item", item)):
                    return
            offer(("end", None))
        except BaseException as e:  # handed to the caller, raised in its thread
            offer(("error", e))

    thread = threading.Thread(target=produce, name="prep-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            try:  # a timeout: a task stopped by the run (Ctrl-C) is not left waiting here
                kind, value = ready.get(timeout=0.1)
            except queue.Empty:
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join()


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
) -> dict[str, Any]:
    """Tokenize `pieces` into shard `index` of each split; its record. Memory holds a batch."""
    if not threads:  # one task per core already; read by tokenizers at every call
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    tok = _load_tokenizer(tok_name, staging, tok_file, tok_sha)
    reader = DocumentReader(cfg.text_field, cfg.errors, int(cfg.max_doc_mb * MB))
    writers = {s: SplitWriter(staging, s, index) for s in SPLITS}
    with writing(writers.values()):
        with stage("write"):
            for w in writers.values():
                w.open(dtype)
        for texts, names in timed_iter("read", read_ahead(_batches(reader, pieces))):
            files = list(dict.fromkeys(names))  # each file once, in order
            where = ", ".join(files[:3]) + (" ..." if len(files) > 3 else "")
            try:
                with stage("tokenize"):
                    ids, lengths = tok.encode(texts)
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
                    writers["val"].add(ids[in_val], lengths[val], list(sources[val]))
                    writers["train"].add(ids[~in_val], lengths[~val], list(sources[~val]))
                else:
                    writers["train"].add(ids, lengths, names)
    done = [s for s in (w.publish() for w in writers.values()) if s is not None]
    more = {"tokenizer_sha256": tok_sha, "inputs": reader.inputs}
    return split_record(staging, index, done, reader.rejects, **more)
