"""prep tokenize: text documents -> flat token shards with document offsets, split train/val.

The run mechanics are prep pack's (prep.run): OUT.partial/, a plan for --resume, one joblib task
per shard that writes its own files and record, manifest last, then the swap.

1. The inputs are listed in a fixed order and cut into shards of about --shard-mb of text (line
   files at line starts); `--limit N` keeps the first N documents. The plan depends only on the
   inputs and the config, never on --jobs.
2. The tokenizer is fitted here, once (char: the corpus's characters; bpe: trained on it), and
   saved into the folder before any shard is written; --resume reuses the saved one.
3. Each task reads its documents in batches, puts each in "train" or "val" by a hash of its text,
   encodes the batch, checks that every id fits the dtype and appends it to that split's files.
4. The manifest records per-split token and document counts, the tokenizer file and checksums.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import (
    MANIFEST,
    REJECTS,
    ArrayRef,
    ArraySpec,
    FileInfo,
    Manifest,
    Shard,
    read_manifest,
)
from prep import PrepError, __version__
from prep.config import TokenizeConfig
from prep.kinds.text.documents import DocumentReader, Piece, count_documents, line_starts, list_text
from prep.kinds.text.tokenizers import Tokenizer, fit_tokenizer, load_saved, tokenizer_identity
from prep.run.files import NpyWriter, atomic_write_text, sha256_file, smallest_uint
from prep.run.parallel import ShardProgress, run_tasks
from prep.run.profile import StageTimer, run_profiled, stage, timed_iter
from prep.run.staging import (
    cleanup_temps,
    finished,
    install,
    load_record,
    prepare_staging,
    shard_task,
    write_error,
    write_record,
    write_rejects,
)

SPLITS = ("train", "val")
ARRAYS = ("tokens", "doc_offsets")
# One encode call per batch: big enough for tokenizers' own threads, small enough for memory.
BATCH_BYTES = 4 << 20
BATCH_DOCS = 4096
MB = 1 << 20


@dataclass
class TokenizeSummary:
    out: Path
    docs: int  # documents tokenized, both splits
    val_docs: int
    tokens: int  # tokens written (end-of-document tokens included)
    rejected: int
    shards: int  # tasks (each writes a train and/or a val shard)
    reused: int
    bytes: int
    seconds: float
    fit_seconds: float  # listing, planning and fitting the tokenizer, before any shard task
    tokenizer: str
    vocab_size: int
    dtype: str
    stages: dict[str, float] | None = None  # with profile=True: seconds per stage, all workers

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second of the shard tasks alone (after the tokenizer was fitted)."""
        busy = self.seconds - self.fit_seconds
        return self.tokens / busy if busy > 0 else 0.0

    def line(self) -> str:
        return (
            f"{self.out}: {self.docs} documents ({self.val_docs} val), {self.tokens:,} tokens, "
            f"{self.rejected} rejected; {self.tokenizer} vocabulary {self.vocab_size} as "
            f"{self.dtype}; {self.shards} shards ({self.reused} reused), "
            f"{self.bytes / 1e6:.1f} MB written; {self.seconds:.1f} s ({self.fit_seconds:.1f} s "
            f"fitting), {self.tokens_per_s:,.0f} tokens/s"
        )


def token_dtype(vocab_size: int) -> str:
    """The narrowest unsigned dtype for ids 0..vocab_size-1: 256 ids fit uint8, 257 do not.

    >>> token_dtype(256), token_dtype(257), token_dtype(65536), token_dtype(65537)
    ('uint8', 'uint16', 'uint16', 'uint32')
    """
    return smallest_uint(max(vocab_size - 1, 0))


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
    """A document's split, from its text alone: the first 8 bytes of its BLAKE2b digest, read
    as a fraction of 2**64, below `val_fraction` means "val". Renaming, reordering or sharding
    the inputs differently never moves a document; identical documents share a split."""
    if val_fraction <= 0:
        return False
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") < int(val_fraction * 2**64)


# ---------------------------------------------------------------- plan


def limit_documents(pieces: list[Piece], limit: int, max_bytes: int) -> list[Piece]:
    """The pieces holding the first `limit` documents, the last one cut after its last line."""
    kept: list[Piece] = []
    left = limit
    for p in pieces:
        n, cut = count_documents(p, left, max_bytes)
        kept.append(Piece(p.path, p.rel, p.start, cut, p.mode) if n == left else p)
        left -= n
        if left == 0:
            break
    return kept


def plan_shards(pieces: list[Piece], shard_bytes: int) -> list[list[Piece]]:
    """Consecutive pieces grouped until a group holds `shard_bytes` of text; line files are first
    cut at line starts into ranges of about `shard_bytes`. A document is never cut."""
    cut: list[Piece] = []
    for p in pieces:
        if p.mode == "file" or p.nbytes <= shard_bytes:
            cut.append(p)
            continue
        starts = [s for s in line_starts(p.path, p.end, shard_bytes) if p.start <= s < p.end]
        bounds = [*starts, p.end]
        cut += [Piece(p.path, p.rel, a, b, p.mode) for a, b in itertools.pairwise(bounds)]
    shards: list[list[Piece]] = []
    group: list[Piece] = []
    size = 0
    for p in cut:
        group.append(p)
        size += p.nbytes
        if size >= shard_bytes:
            shards.append(group)
            group, size = [], 0
    if group:
        shards.append(group)
    return shards


# ---------------------------------------------------------------- the shard task


class SplitWriter:
    """One split's shard of one task: tokens and doc_offsets (docs + 1 int64, from 0)."""

    def __init__(self, staging: Path, split: str, index: int, dtype: str):
        self.staging = staging
        stems = {name: f"{name}-{split}-{index:05d}" for name in ARRAYS}
        self.final = {name: f"{stem}.npy" for name, stem in stems.items()}
        self.split = split
        # Temp names are per process (as prep pack's): a worker that its killed parent left
        # running cannot rename the files of the --resume run redoing the same shard.
        tmp = {name: staging / f".{stem}.{os.getpid()}.npy.tmp" for name, stem in stems.items()}
        self.tokens = NpyWriter(tmp["tokens"], dtype, ())
        self.offsets = NpyWriter(tmp["doc_offsets"], "int64", ())
        self.offsets.extend(np.zeros(1, np.int64))
        self.total = 0
        self.docs = 0

    def add(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        self.tokens.extend(ids)
        self.offsets.extend(self.total + np.cumsum(lengths, dtype=np.int64))
        self.total += len(ids)
        self.docs += len(lengths)

    def abort(self) -> None:
        self.tokens.abort()
        self.offsets.abort()

    def close(self) -> None:
        """Finish the temp files (header, fsync); a split with no documents keeps none."""
        if self.docs == 0:
            self.abort()
            return
        self.tokens.close()
        self.offsets.close()

    def rename(self) -> Shard | None:
        """After close(): the files under their final names; None for a split with no
        documents in this task."""
        if self.docs == 0:
            return None
        arrays, files = {}, {}
        for name, w in (("tokens", self.tokens), ("doc_offsets", self.offsets)):
            final = self.staging / self.final[name]
            os.replace(w.path, final)
            arrays[name] = ArrayRef(final.name, w.length)
            with stage("checksum"):
                digest = sha256_file(final)
            files[final.name] = FileInfo(final.stat().st_size, digest)
        return Shard(self.docs, arrays, files, self.split)


def _batches(reader: DocumentReader, pieces: list[Piece]) -> Iterator[tuple[list[str], list[str]]]:
    """(texts, names of the files they came from), about BATCH_BYTES of text at a time."""
    texts: list[str] = []
    names: list[str] = []
    size = 0
    for p in pieces:
        for text in reader.read(p):
            texts.append(text)
            if not names or names[-1] != p.rel:
                names.append(p.rel)
            size += len(text)
            if size >= BATCH_BYTES or len(texts) >= BATCH_DOCS:
                yield texts, names
                texts, names, size = [], [], 0
    if texts:
        yield texts, names


@functools.lru_cache(maxsize=2)
def _load_tokenizer(name: str, folder: Path, file: str | None, sha: str) -> Tokenizer:
    """Once per process and tokenizer file (`sha` tells a changed file apart): joblib reuses
    its workers for many shards, and the tokenizer's word cache stays warm between them."""
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
    """The joblib task: tokenize `pieces` into shard `index` of each split; return its record.

    Memory holds one batch of documents; only counts, checksums and rejects leave the process.
    A failed write raises PrepError naming the file and leaves no temp file of the shard."""
    if not threads:  # one task per core already; read by tokenizers at every call
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    tok = _load_tokenizer(tok_name, staging, tok_file, tok_sha)
    reader = DocumentReader(cfg.text_field, cfg.errors, int(cfg.max_doc_mb * MB))
    with stage("write"):
        writers = {s: SplitWriter(staging, s, index, dtype) for s in SPLITS}
    try:
        for texts, names in timed_iter("read", _batches(reader, pieces)):
            where = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
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
                    writers["val"].add(ids[in_val], lengths[val])
                    writers["train"].add(ids[~in_val], lengths[~val])
                else:
                    writers["train"].add(ids, lengths)
        with stage("write"):
            for w in writers.values():
                w.close()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    shards = [w.rename() for w in writers.values()]
    done = [asdict(s) for s in shards if s is not None]
    record = {
        "index": index,
        "tokenizer_sha256": tok_sha,
        # prep.run checks the files of record["shard"]: here, those of every split's shard.
        "shard": {"files": {k: v for s in done for k, v in s["files"].items()}},
        "splits": done,
        "rejects": reader.rejects,
        "inputs": reader.inputs,
    }
    with stage("write"):
        write_record(staging, index, record)
    return record


# ---------------------------------------------------------------- the command


def _fingerprint(pieces: list[Piece], spec: str) -> str:
    seen: list[Any] = []
    for p in pieces:
        st = Path(p.path).stat()
        seen.append((p.rel, p.start, p.end, st.st_size, st.st_mtime_ns))
    if spec.endswith(".json"):  # a user's tokenizer file: its bytes are an input too
        seen.append(("tokenizer", sha256_file(Path(spec))))
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()


def _tokenizer(
    cfg: TokenizeConfig, staging: Path, corpus: Callable[[], Iterator[str]]
) -> tuple[Tokenizer, str, str | None]:
    """The run's tokenizer, saved in `staging`: reused from there on --resume, else fitted."""
    name, file = tokenizer_identity(cfg.tokenizer)
    if cfg.resume and (file is None or (staging / file).is_file()):
        return load_saved(name, staging, file), name, file
    tok = fit_tokenizer(cfg.tokenizer, corpus, cfg.vocab_size)
    tok.save(staging)
    return load_saved(name, staging, file), name, file


def tokenize(
    cfg: TokenizeConfig, show_progress: bool = True, profile: bool = False
) -> TokenizeSummary:
    """Tokenize cfg.src into cfg.out; see the module docstring for the guarantees.

    `profile`: the summary's `stages` holds the seconds per stage of this run (prep.run.profile)."""
    cfg.validate()
    start = time.perf_counter()
    src, out = Path(str(cfg.src)), Path(str(cfg.out))
    # The checks of prep pack: an OUT that is a file or a non-empty folder fails before listing,
    # unless --overwrite, or --resume of a run that may be finished already (checked below).
    occupied = out.exists() and (not out.is_dir() or any(out.iterdir()))
    if occupied and not (cfg.overwrite or cfg.resume):
        prepare_staging(out, {}, cfg.overwrite, cfg.resume)
    timer = StageTimer()
    with timer.stage("list"):
        pieces, list_rejects = list_text(src, cfg.split_lines)
    if not pieces:
        raise PrepError(
            f"no readable .txt or .jsonl input in {src} ({len(list_rejects)} rejected). "
            "HINT: SRC is a folder of .txt files, a .txt file or a .jsonl file"
        )
    max_bytes = int(cfg.max_doc_mb * MB)
    if cfg.limit is not None:
        pieces = limit_documents(pieces, cfg.limit, max_bytes)
    shards = plan_shards(pieces, max(1, int(cfg.shard_mb * MB)))
    inputs = _fingerprint(pieces, cfg.tokenizer)
    plan = {"config": cfg.output_config(), "inputs": inputs}
    if cfg.resume and not cfg.overwrite and finished(out, plan):
        return _already_done(out, start)  # killed after the swap: nothing left to do
    staging = prepare_staging(out, plan, cfg.overwrite, cfg.resume)

    def corpus() -> Iterator[str]:
        reader = DocumentReader(cfg.text_field, cfg.errors, max_bytes)
        for p in pieces:
            yield from reader.read(p)

    try:
        with timer.stage("fit"):
            tok, name, file = _tokenizer(cfg, staging, corpus)
    except OSError as e:  # saving it: the first file of the run
        raise write_error(e, str(staging)) from e
    tok_sha = sha256_file(staging / file) if file else ""
    dtype = token_dtype(tok.vocab_size)
    records: dict[int, dict[str, Any]] = {}
    if cfg.resume:
        for i in range(len(shards)):
            rec = load_record(staging, i, verify=True)
            if rec is not None and rec.get("tokenizer_sha256") == tok_sha:
                records[i] = rec
    reused = len(records)
    fit_seconds = time.perf_counter() - start

    todo_ids = [i for i in range(len(shards)) if i not in records]
    threads = cfg.n_jobs == 1 or len(todo_ids) <= 1
    parent = os.getpid() if cfg.backend == "loky" else None  # see prep.run.staging.exit_with_parent
    todo = [
        (i, shards[i], cfg, name, file, tok_sha, dtype, staging, threads, parent) for i in todo_ids
    ]
    kb = {i: max(1, sum(p.nbytes for p in shards[i]) >> 10) for i in todo_ids}
    bar = (
        ShardProgress(sum(kb.values()), len(todo), "kB", f"tokenize {out.name}")
        if show_progress
        else None
    )
    try:
        task = functools.partial(run_profiled, profile, tokenize_shard)
        for rec in run_tasks(task, todo, cfg.n_jobs, cfg.backend):
            timer.add(rec.pop("stages", {}))
            records[rec["index"]] = rec
            if bar is not None:
                bar.shard_done(kb[rec["index"]])
    except BaseException:
        cleanup_temps(staging)
        raise
    finally:
        if bar is not None:
            bar.close()
    try:
        tok_info = {"name": name, "file": file, "sha256": tok_sha or None}
        manifest = _finish(
            cfg, src, out, staging, list_rejects, records, tok, tok_info, dtype, inputs
        )
    except OSError as e:
        raise write_error(e, str(staging)) from e
    splits = manifest.extra["splits"]
    return TokenizeSummary(
        out=out,
        docs=manifest.num_samples,
        val_docs=splits["val"]["docs"],
        tokens=sum(s["tokens"] for s in splits.values()),
        rejected=manifest.rejects,
        shards=len(records),
        reused=reused,
        bytes=_bytes(out, manifest),
        seconds=time.perf_counter() - start,
        fit_seconds=fit_seconds,
        tokenizer=manifest.extra["tokenizer"]["name"],
        vocab_size=tok.vocab_size,
        dtype=dtype,
        stages=timer.seconds if profile else None,
    )


def _finish(
    cfg: TokenizeConfig,
    src: Path,
    out: Path,
    staging: Path,
    list_rejects: list[dict[str, Any]],
    records: dict[int, dict[str, Any]],
    tok: Tokenizer,
    tok_info: dict[str, Any],
    dtype: str,
    inputs: str,
) -> Manifest:
    """rejects.jsonl, the max-rejects check, the manifest, then the swap into place."""
    ordered = [records[i] for i in sorted(records)]
    rejects = write_rejects(staging, list_rejects + [r for rec in ordered for r in rec["rejects"]])
    n_inputs = len(list_rejects) + sum(rec["inputs"] for rec in ordered)
    if n_inputs and len(rejects) / n_inputs > cfg.max_rejects:
        raise PrepError(
            f"{len(rejects)} of {n_inputs} documents rejected ({len(rejects) / n_inputs:.1%} > "
            f"--max-rejects {cfg.max_rejects:g}); see {staging / REJECTS}. HINT: fix or remove "
            "them and rerun with --resume, or raise --max-rejects"
        )
    parts = [Shard.from_dict(s) for rec in ordered for s in rec["splits"]]
    if not parts:
        raise PrepError(
            f"no usable documents in {src} ({len(rejects)} rejected, see {staging / REJECTS}). "
            "HINT: check the encoding, or --text-field for .jsonl"
        )
    splits = {
        s: {
            "docs": sum(p.count for p in parts if p.split == s),
            "tokens": sum(p.arrays["tokens"].length for p in parts if p.split == s),
            "shards": sum(1 for p in parts if p.split == s),
        }
        for s in SPLITS
    }
    manifest = Manifest(
        kind="tokens",
        storage="npy",
        arrays={
            "tokens": ArraySpec("tokens", None, dtype, ()),
            "doc_offsets": ArraySpec("doc_offsets", None, "int64", ()),
        },
        shards=parts,
        config=cfg.output_config(),
        rejects=len(rejects),
        tool_version=__version__,
        extra={
            "vocab_size": tok.vocab_size,
            "eot_id": tok.eot_id,
            "tokenizer": tok_info,
            "splits": splits,
            "inputs": inputs,  # as the plan's: see prep.run.staging.finished
        },
    )
    atomic_write_text(staging / MANIFEST, manifest.to_json())
    install(staging, out)
    return manifest


def _bytes(out: Path, m: Manifest) -> int:
    """The bytes of the dataset's shards and tokenizer file."""
    file = m.extra["tokenizer"]["file"]
    shards = sum(f.bytes for s in m.shards for f in s.files.values())
    return shards + ((out / file).stat().st_size if file else 0)


def _already_done(out: Path, start: float) -> TokenizeSummary:
    """The summary of a complete dataset that --resume leaves as it is."""
    m = read_manifest(out)
    splits = m.extra["splits"]
    tasks = {s.arrays["tokens"].file.rsplit("-", 1)[1] for s in m.shards}  # one per index
    return TokenizeSummary(
        out=out,
        docs=m.num_samples,
        val_docs=splits["val"]["docs"],
        tokens=sum(s["tokens"] for s in splits.values()),
        rejected=m.rejects,
        shards=len(tasks),
        reused=len(tasks),
        bytes=_bytes(out, m),
        seconds=time.perf_counter() - start,
        fit_seconds=0.0,
        tokenizer=m.extra["tokenizer"]["name"],
        vocab_size=m.extra["vocab_size"],
        dtype=m.arrays["tokens"].dtype,
    )
