"""prep tokenize: the text kind of the run driver. Shards of about --shard-mb of text; the
tokenizer fitted once (`prepare`) and saved in the run folder; each task writes each split's
tokens, ragged by document, and each document's `source`."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Array, Text, Tokens, declared
from loaders.fields.base import encode_source
from loaders.fields.tokens import LOSS_MASK
from loaders.format import ArraySpec, Manifest, sha256_file
from loaders.format.index import stem
from prep.kinds.text.config import TokenizeConfig
from prep.media.text.chat import ChatReader, encode_chats, template_text
from prep.media.text.documents import DocumentReader, Piece, count_documents, line_starts, list_text
from prep.media.text.tokenizers import Tokenizer, fit_tokenizer, load_saved, tokenizer_identity
from prep.run.driver import run
from prep.run.errors import PrepError
from prep.run.grow import Parent, check_fields, file_identity, link
from prep.run.kind import Inputs, Kind, array_specs, fingerprint
from prep.run.profile import stage, timed_iter
from prep.run.sharding import grouped
from prep.run.shardwriter import ShardFiles, shard_task, split_record, writing
from prep.run.summary import RunSummary
from prep.sources.text import list_matching

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
        for name, n in self.runs:
            path = encode_source(name)
            for start in range(0, n, 1 << 16):  # bounded memory for a file of many lines
                k = min(n - start, 1 << 16)
                source.extend(np.tile(path, k), np.full(k, len(path)))
        super().close()


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
    reader = _reader(cfg)
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


def _reader(cfg: TokenizeConfig) -> DocumentReader:
    """The documents of the inputs: texts, or with --chat chats as their segments (chat.py)."""
    if cfg.chat:
        return ChatReader(
            template_text(cfg.chat_template, cfg.tokenizer), cfg.errors, int(cfg.max_doc_mb * MB)
        )
    return DocumentReader(cfg.text_field, cfg.errors, int(cfg.max_doc_mb * MB))


def token_dtype(vocab_size: int) -> str:
    """The narrowest unsigned dtype for ids 0..vocab_size-1: 256 ids fit uint8, 257 do not.

    >>> token_dtype(256), token_dtype(257), token_dtype(65536), token_dtype(65537)
    ('uint8', 'uint16', 'uint16', 'uint32')
    """
    return Tokens(max(vocab_size, 1)).arrays("tokens")[0].dtype


def plan_shards(pieces: list[Piece], shard_bytes: int) -> list[list[Piece]]:
    """Pieces grouped by `shard_bytes` of text, line files first cut at line starts."""
    cut: list[Piece] = []
    for p in pieces:
        if p.mode == "file" or p.nbytes <= shard_bytes:
            cut.append(p)
            continue
        starts = [s for s in line_starts(p.path, p.end, shard_bytes) if p.start <= s < p.end]
        cut += [Piece(p.path, p.rel, a, b, p.mode) for a, b in itertools.pairwise([*starts, p.end])]
    return grouped(cut, attrgetter("nbytes"), shard_bytes)


@dataclass
class TokenizeSummary(RunSummary):
    packings: dict[str, int] = field(default_factory=dict)  # --pack: split -> its sequences
    first: int = 0  # the first shard this run wrote (an append's: after the dataset's)

    @property
    def docs(self) -> int:
        return self.packed

    @property
    def val_docs(self) -> int:
        m = self.manifest
        return int(m.counts()[self.first :][m.split_of()[self.first :] == "val"].sum())

    @property
    def tokens(self) -> int:
        return sum(s.arrays["tokens"].length for s in list(self.manifest.shards)[self.first :])

    @property
    def tokenizer(self) -> str:
        return str(self.manifest.fields["tokens"]["tokenizer_name"])

    @property
    def vocab_size(self) -> int:
        return int(self.manifest.fields["tokens"]["vocab_size"])

    @property
    def dtype(self) -> str:
        return self.manifest.arrays["tokens"].dtype

    def line(self) -> str:
        busy = self.seconds - self.prepare_seconds  # the shard tasks' (after the fitting)
        rate = self.tokens / busy if busy > 0 else 0.0
        return (
            f"{self.out}: {self.docs} documents ({self.val_docs} val){self.held()}, "
            f"{self.tokens:,} tokens, "
            f"{self.said_rejected()}; {self.tokenizer} vocabulary {self.vocab_size} as "
            f"{self.dtype}; {self.shards} shards ({self.reused} reused), "
            f"{self.bytes / 1e6:.1f} MB written; {self.seconds:.1f} s "
            f"({self.prepare_seconds:.1f} s fitting), {rate:,.0f} tokens/s"
        ) + "".join(f"; {split} packed into {n:,} sequences" for split, n in self.packings.items())


class TextKind(Kind[TokenizeConfig, list[Piece]]):
    command = "tokenize"
    unit = "kB"
    noun = "documents"
    counted = "inputs"
    summary = TokenizeSummary
    prepare_stage = "fit"
    task = staticmethod(tokenize_shard)
    appendable = True  # new documents: new shards of their split's token stream

    def sources(self) -> list[Path]:
        spec = self.cfg.tokenizer
        return [Path(str(self.cfg.src))] + ([Path(spec)] if spec.endswith(".json") else [])

    def list_inputs(self) -> Inputs:
        cfg = self.cfg
        if cfg.glob is not None:
            pieces, rejects = list_matching(Path(str(cfg.src)), cfg.glob, cfg.split_lines)
        else:
            pieces, rejects = list_text(Path(str(cfg.src)), cfg.split_lines)
        if not pieces:
            what = f"file matching --glob {cfg.glob!r}" if cfg.glob else ".txt or .jsonl input"
            raise PrepError(
                f"no readable {what} in {cfg.src} ({len(rejects)} rejected). HINT: SRC is a "
                "folder of .txt files, a .txt or a .jsonl file; --glob '*.py,*.md' reads others"
            )
        plain = [p.rel for p in pieces if p.mode != "jsonl"]
        if cfg.chat and plain:
            raise PrepError(
                f"--chat reads chats from .jsonl files; {plain[0]} is not one. HINT: one JSON "
                'object a line: {"messages": [{"role": "user", "content": ...}, ...]}'
            )
        if cfg.limit is not None:
            kept, left = [], cfg.limit  # the pieces of the first `limit` documents, the last cut
            for p in pieces:
                n, cut = count_documents(p, left, int(cfg.max_doc_mb * MB))
                kept.append(Piece(p.path, p.rel, p.start, cut, p.mode) if n == left else p)
                left -= n
                if left == 0:
                    break
            pieces = kept
        self.pieces = pieces
        seen: list[Any] = []
        for p in pieces:
            st = Path(p.path).stat()
            seen.append((p.rel, p.start, p.end, st.st_size, st.st_mtime_ns))
        if cfg.tokenizer.endswith(".json"):  # a user's tokenizer file: its bytes are an input too
            seen.append(("tokenizer", sha256_file(Path(cfg.tokenizer))))
        if cfg.chat:  # so is the chat template
            seen.append(("chat", template_text(cfg.chat_template, cfg.tokenizer)))
        return Inputs(len(pieces), rejects, fingerprint(seen))

    def identities(self) -> dict[str, str]:
        """A piece of a file (its name and first byte) and the file's size and time."""
        return {piece_name(p): file_identity(p.path, None, None, p.end) for p in self.pieces}

    def grow(self, parent: Parent, fresh: set[str]) -> int:
        self.parent = parent
        self.pieces = [p for p in self.pieces if piece_name(p) in fresh]
        self.fields = dict(declared(parent.manifest))  # until `prepare` loads its tokenizer
        return len(self.pieces)

    def plan(self) -> list[list[Piece]]:
        self.shards = plan_shards(self.pieces, max(1, int(self.cfg.shard_mb * MB)))
        return self.shards

    def prepare(self, staging: Path, resume: bool) -> None:
        """The run's tokenizer, saved in `staging` (reused on --resume)."""
        cfg = self.cfg
        name, file = tokenizer_identity(cfg.tokenizer)
        if self.parent is not None and file:  # the dataset's: its ids keep their meaning
            link(Path(os.path.abspath(str(cfg.out))) / file, staging / file)
        elif not (resume and (file is None or (staging / file).is_file())):
            fit_tokenizer(cfg.tokenizer, self._corpus, cfg.vocab_size).save(staging)
        self.tok = load_saved(name, staging, file)
        self.tok_info = (name, file)
        self.tok_sha = sha256_file(staging / file) if file else ""
        self.dtype = token_dtype(self.tok.vocab_size)
        tokens = Tokens(
            vocab_size=self.tok.vocab_size,
            tokenizer=file,
            eot_id=self.tok.eot_id,
            tokenizer_name=name,
            tokenizer_sha256=self.tok_sha or None,
        )  # ragged: a document a sample
        self.fields = {"tokens": tokens, "source": Text()}
        if cfg.chat:  # 1 on the tokens trained on, ragged as the tokens
            self.fields[LOSS_MASK] = Array("uint8", (None,))
        if self.parent is not None:
            check_fields(self.parent.manifest, self.described(), array_specs(self.fields))

    def _corpus(self) -> Iterator[str]:
        reader = _reader(self.cfg)
        for p in self.pieces:
            for doc in reader.read(p):  # a chat: its rendered text
                yield "".join(t for t, _ in json.loads(doc)) if self.cfg.chat else doc

    def weight(self, shard: list[Piece]) -> int:
        return max(1, sum(p.nbytes for p in shard) >> 10)

    def task_args(self, index: int, shard: list[Piece], staging: Path) -> tuple[Any, ...]:
        cfg = self.cfg
        threads = cfg.n_jobs == 1 or len(self.shards) <= 1  # else one task per core already
        specs = array_specs(self.fields, cfg)
        return (
            index,
            shard,
            cfg,
            *self.tok_info,
            self.tok_sha,
            self.dtype,
            staging,
            threads,
            specs,
        )

    def reusable(self, record: dict[str, Any]) -> bool:
        return record.get("tokenizer_sha256") == self.tok_sha and super().reusable(record)

    def manifest(self, records: list[dict[str, Any]]) -> Manifest:
        if not any(rec["splits"] for rec in records):
            raise PrepError(
                f"no usable documents in {self.cfg.src} (see the rejects in the run folder). "
                "HINT: check the encoding, or --text-field for .jsonl"
            )
        return super().manifest(records)

    def bytes(self, out: Path, manifest: Manifest) -> int:
        file = manifest.fields["tokens"]["tokenizer"]
        return super().bytes(out, manifest) + ((out / file).stat().st_size if file else 0)


def piece_name(p: Piece) -> str:
    return f"{p.rel}:{p.start}"


def tokenize(
    cfg: TokenizeConfig, show_progress: bool = True, profile: bool = False
) -> TokenizeSummary:
    """Tokenize cfg.src into cfg.out; `profile`: the summary's `stages` (prep.run.profile)."""
    kind = TextKind(cfg)
    summary = run(kind, show_progress, profile)
    assert isinstance(summary, TokenizeSummary)
    if kind.parent is not None:  # the counts of the line: this run's documents
        summary.first = len(kind.parent.manifest.shards)
    if cfg.pack is not None:
        summary.packings = store_packings(Path(str(cfg.out)), cfg.pack, summary.manifest.splits)
    return summary


def store_packings(out: Path, seq_len: int, splits: list[str]) -> dict[str, int]:
    """Each split's best-fit packing over the whole split, beside its tokens (docs/format.md): the
    sequences of each."""
    from loaders.datasets.packed import PackedDataset
    from loaders.packing import packing_name, save_plan

    done = {}
    for split in splits:
        ds = PackedDataset(out, seq_len, split, window=None, stored=False)
        plan = ds.plan(0)
        save_plan(out / packing_name(split, seq_len), plan)
        done[split] = len(plan)
    return done
