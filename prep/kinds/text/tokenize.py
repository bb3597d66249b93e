"""prep tokenize: the text kind of the run driver. Shards of about --shard-mb of text (line files
cut at line starts); the tokenizer fitted once (`prepare`) and saved in the run folder; each task
(prep.kinds.text.shard) writes each split's tokens, ragged by document, and each document's
`source`; --pack's packings stored after the run."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

from loaders.fields import Array, Text, Tokens, declared
from loaders.fields.tokens import LOSS_MASK
from loaders.format import Manifest, sha256_file
from prep.kinds.text.config import TokenizeConfig
from prep.kinds.text.shard import MB, document_reader, tokenize_shard
from prep.media.text.chat import template_text
from prep.media.text.documents import Piece, count_documents, line_starts, list_text
from prep.media.text.tokenizers import fit_tokenizer, load_saved, tokenizer_identity
from prep.run.driver import run
from prep.run.errors import PrepError
from prep.run.grow import Parent, check_fields, file_identity, link
from prep.run.kind import Inputs, Kind, array_specs, fingerprint
from prep.run.sharding import grouped
from prep.run.summary import RunSummary
from prep.sources.text import list_matching


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
        self.stats: dict[str, os.stat_result] = {}  # a listed file's one stat, by its rel
        if cfg.glob is not None:
            pieces, rejects = list_matching(Path(str(cfg.src)), cfg.glob, cfg.split_lines)
        else:
            pieces, rejects = list_text(Path(str(cfg.src)), cfg.split_lines, self.stats)
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
            st = self.stats.get(p.rel) or self.stats.setdefault(p.rel, Path(p.path).stat())
            seen.append((p.rel, p.start, p.end, st.st_size, st.st_mtime_ns))
        if cfg.tokenizer.endswith(".json"):  # a user's tokenizer file: its bytes are an input too
            seen.append(("tokenizer", sha256_file(Path(cfg.tokenizer))))
        if cfg.chat:  # so is the chat template
            seen.append(("chat", template_text(cfg.chat_template, cfg.tokenizer)))
        return Inputs(len(pieces), rejects, fingerprint(seen))

    def identities(self) -> dict[str, str]:
        """A piece of a file (its name and first byte) and the file's size and time (listed)."""
        return {
            piece_name(p): file_identity(p.path, None, None, p.end, st=self.stats.get(p.rel))
            for p in self.pieces
        }

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
        reader = document_reader(self.cfg)
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
