"""Packing documents into sequences of `seq_len` tokens: plans (which piece of which document
goes where), the attention masks that keep each document to itself, and the batch collate.

A plan is pure data: sequence s holds spans `starts[s]:starts[s + 1]`, span j the tokens
`offset[j]:offset[j] + length[j]` of document `doc[j]`. Documents longer than `seq_len` are
first cut into pieces of `seq_len` (the last one shorter); every piece is in exactly one span.

>>> p = plan(np.array([3, 5, 2, 9]), seq_len=8, strategy="best_fit", window=None)
>>> [p.spans(s) for s in range(len(p))]  # the 9 cut to 8 + 1: 5 + 3, 2 + 1, then the 8
[[(1, 0, 5), (0, 0, 3)], [(2, 0, 2), (3, 8, 1)], [(3, 0, 8)]]
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from loaders.bins import best_fit, first_fit, stable_order

STRATEGIES = ("best_fit", "greedy", "concat")
WINDOW = 1 << 16  # best_fit's pieces per window: within 0.1% of the whole split (bench row)
IGNORE = -100  # a label no loss is computed on: torch's cross_entropy ignore_index


@dataclass(frozen=True)
class Plan:
    """Sequence s: spans starts[s]:starts[s + 1] of (doc, offset, length), all int64."""

    starts: np.ndarray
    doc: np.ndarray
    offset: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return len(self.starts) - 1

    def spans(self, s: int) -> list[tuple[int, int, int]]:
        a, b = int(self.starts[s]), int(self.starts[s + 1])
        cols = (self.doc[a:b], self.offset[a:b], self.length[a:b])
        return [tuple(map(int, span)) for span in zip(*cols, strict=True)]  # type: ignore[misc]

    def tokens(self) -> int:
        return int(self.length.sum())


def _spans(
    lengths: np.ndarray,
    seq_len: int,
    docs: np.ndarray,
    size: np.ndarray,
    bins: np.ndarray,
    count: int,
) -> Plan:
    """The plan: bins 0..count-1 of last pieces (document docs[j]'s, of size[j] tokens, in bin
    bins[j], in placement order), then each document's whole sequences, one a sequence."""
    by_bin, m = stable_order(bins), len(bins)
    long = np.flatnonzero(lengths >= seq_len)  # the documents with whole sequences
    whole = lengths[long] // seq_len
    doc, offset, length = (np.empty(m + int(whole.sum()), np.int64) for _ in range(3))
    doc[:m], length[:m] = docs[by_bin], size[by_bin]
    offset[:m] = lengths[doc[:m]] - length[:m]
    # Whole sequences, each document's in a run (millions of them: written in place, as
    # running sums of steps that are 0 and seq_len inside a run)
    first = np.cumsum(whole) - whole
    run, off = doc[m:], offset[m:]
    run[:] = 0
    run[first] = np.diff(long, prepend=0)
    off[:] = seq_len
    off[first] = (1 - np.r_[1, whole[:-1]]) * seq_len  # back to 0 after the previous run
    np.cumsum(run, out=run)
    np.cumsum(off, out=off)
    length[m:] = seq_len
    starts = np.empty(count + 1 + len(run), np.int64)
    starts[0] = 0
    np.cumsum(np.bincount(bins, minlength=count), out=starts[1 : count + 1])
    starts[count + 1 :] = np.arange(m + 1, len(doc) + 1)
    return Plan(starts, doc, offset, length)


def plan(
    lengths: np.ndarray,
    seq_len: int,
    strategy: str = "best_fit",
    seed: int = 0,
    epoch: int = 0,
    window: int | None = WINDOW,
) -> Plan:
    """Pack documents of `lengths` tokens into sequences of `seq_len`; deterministic in
    (seed, epoch). best_fit: best-fit decreasing over shuffled windows of `window` pieces (None:
    the whole split at once); greedy: first fit in shuffled order, over the same windows;
    concat: the documents in order, cut where a sequence ends (no padding but the last)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if seq_len < 2:
        raise ValueError(f"seq_len {seq_len} must be at least 2 (a token and its label)")
    if window is not None and window < 1:
        raise ValueError(f"window {window} must be positive, or None for the whole split")
    lengths = np.asarray(lengths, dtype=np.int64)
    if strategy == "concat":
        return _concat(lengths, seq_len)
    # A document's whole sequences need no search: only its last piece (what is left after
    # them) is packed with others.
    docs = np.flatnonzero(lengths % seq_len)
    n = len(docs)
    order = np.random.default_rng([seed, epoch]).permutation(n)  # any process: the same
    docs = docs[order]
    size = lengths[docs] % seq_len
    win = np.arange(n) // max(1, n if window is None else window)  # each piece's window
    if strategy == "best_fit":  # decreasing within each window; ties keep the shuffled order
        by = stable_order(win * seq_len + (seq_len - size))
        docs, size = docs[by], size[by]  # (each piece stays in its window)
    bounds = np.searchsorted(win, np.arange(int(win[-1]) + 2 if n else 1)).tolist()
    pack = best_fit if strategy == "best_fit" else first_fit
    bins, count = pack(size, bounds, seq_len)
    return _spans(lengths, seq_len, docs, size, bins, count)


def _concat(lengths: np.ndarray, seq_len: int) -> Plan:
    """The documents end to end, cut at every multiple of seq_len as well as at their ends."""
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    cuts = np.union1d(ends[lengths > 0], np.arange(seq_len, total, seq_len))
    if len(cuts) == 0:
        return Plan(np.zeros(1, np.int64), *(np.zeros(0, np.int64) for _ in range(3)))
    begin = np.concatenate([[0], cuts[:-1]])
    doc = np.searchsorted(ends, begin, side="right")
    offset = begin - (ends[doc] - lengths[doc])
    seq = begin // seq_len
    starts = np.searchsorted(seq, np.arange(seq[-1] + 2)).astype(np.int64)
    return Plan(starts, doc.astype(np.int64), offset, (cuts - begin).astype(np.int64))


def segments(lengths: Sequence[int] | np.ndarray, seq_len: int) -> torch.Tensor:
    """One sequence's cu_seqlens, int32: 0, the ends of its spans, and seq_len when padded
    (the padding a segment of its own, so that no row's last document joins the next row)."""
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    used = int(ends[-1]) if len(ends) else 0
    pad = [seq_len] if used < seq_len else []
    return torch.tensor([0, *ends.tolist(), *pad], dtype=torch.int32)


def flat_segments(rows: Sequence[torch.Tensor], seq_len: int) -> torch.Tensor:
    """Rows' cu_seqlens as one for the flattened batch (B * seq_len tokens), FlashAttention's
    varlen convention: int32, from 0, row r's segments shifted by r * seq_len."""
    parts = [rows[0]] + [c[1:] + r * seq_len for r, c in enumerate(rows) if r]
    return torch.cat(parts).to(torch.int32)


def collate(items: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A DataLoader collate_fn for PackedDataset's items: fields stacked, cu_seqlens flattened."""
    seq_len = len(items[0]["input_ids"])
    out = {k: torch.stack([it[k] for it in items]) for k in items[0] if k != "cu_seqlens"}
    out["cu_seqlens"] = flat_segments([it["cu_seqlens"] for it in items], seq_len)
    return out


def _segment_ids(cu_seqlens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Each token's segment number, (B, seq_len) for a flattened batch's cu_seqlens."""
    cu = cu_seqlens.to(torch.int64)
    total = int(cu[-1])
    if total % seq_len:
        raise ValueError(f"cu_seqlens end at {total}, not a multiple of seq_len {seq_len}")
    flat = torch.arange(total, device=cu.device)
    return (torch.searchsorted(cu, flat, right=True) - 1).view(-1, seq_len)


def block_mask(cu_seqlens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Bool (B, 1, seq_len, seq_len), True where query i may attend key j: the same segment
    and j <= i; for scaled_dot_product_attention's attn_mask (heads broadcast). Every row
    attends to itself at least, padding too, so no softmax is over nothing."""
    seg = _segment_ids(cu_seqlens, seq_len)
    same = seg[:, :, None] == seg[:, None, :]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=seg.device).tril()
    return (same & causal)[:, None]


def flex_block_mask(cu_seqlens: torch.Tensor, seq_len: int, heads: int | None = None) -> Any:
    """The same mask as a FlexAttention BlockMask (torch >= 2.5), for flex_attention."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask
    except ImportError as e:
        raise RuntimeError(
            f"this torch ({torch.__version__}) has no FlexAttention. HINT: torch >= 2.5, or "
            "block_mask() with scaled_dot_product_attention"
        ) from e
    seg = _segment_ids(cu_seqlens, seq_len)

    def same_document(b: Any, h: Any, q: Any, k: Any) -> Any:
        return (seg[b, q] == seg[b, k]) & (k <= q)

    return create_block_mask(
        same_document, len(seg), heads, seq_len, seq_len, device=str(seg.device)
    )


def packing_name(split: str, seq_len: int) -> str:
    """Where `prep tokenize --pack` stores a split's packing, in the dataset's folder."""
    return f"packing/{split}-{seq_len}.npz"


def save_plan(path: Path, p: Plan) -> None:
    """`p` as an .npz of its four arrays, renamed into place whole (a reader never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, starts=p.starts, doc=p.doc, offset=p.offset, length=p.length)
    os.replace(tmp, path)


def plan_problem(p: Plan, lengths: np.ndarray, seq_len: int) -> str | None:
    """Why `p` is not a packing of documents of `lengths` into `seq_len` (None: it is): every
    token of every document in exactly one span, no sequence over seq_len."""
    s, n = p.starts, len(p.doc)
    if len(s) < 1 or s[0] != 0 or s[-1] != n or (np.diff(s) < 1).any():
        return "its sequence starts are not increasing from 0 to its span count"
    if len(p.offset) != n or len(p.length) != n:
        return "its span arrays differ in length"
    if n and (p.doc.min() < 0 or p.doc.max() >= len(lengths) or p.length.min() < 1):
        return f"a span names no document of the {len(lengths)}, or is empty"
    if len(s) > 1 and np.add.reduceat(p.length, s[:-1]).max(initial=0) > seq_len:
        return f"a sequence holds more than seq_len {seq_len} tokens"
    by = np.lexsort((p.offset, p.doc))
    doc, off, end = p.doc[by], p.offset[by], p.offset[by] + p.length[by]
    first = np.r_[True, doc[1:] != doc[:-1]]
    follows = np.where(first, off == 0, off == np.r_[0, end[:-1]])
    last = np.r_[doc[1:] != doc[:-1], True]
    whole = end[last] == lengths[doc[last]]
    if not (follows.all() and whole.all() and len(np.unique(doc)) == (lengths > 0).sum()):
        return "its spans do not cover each document's tokens exactly once"
    return None


def load_plan(
    path: Path | str, lengths: np.ndarray, seq_len: int, data: bytes | None = None
) -> Plan:
    """A stored packing (the file at `path`, or its bytes `data` read from there), checked
    against the documents' `lengths` (FormatError if it does not fit them: the dataset was
    written again without --pack)."""
    from loaders.format import FormatError

    try:
        with np.load(path if data is None else io.BytesIO(data), allow_pickle=False) as z:
            p = Plan(
                *(np.asarray(z[k], dtype=np.int64) for k in ("starts", "doc", "offset", "length"))
            )
    except (OSError, ValueError, KeyError, EOFError) as e:
        raise FormatError(f"{path}: not a packing ({e}). HINT: prep tokenize --pack again") from e
    problem = plan_problem(p, lengths, seq_len)
    if problem is not None:
        raise FormatError(
            f"{path}: {problem}. HINT: it belongs to another tokenization: prep tokenize "
            f"--pack {seq_len} again, or delete it"
        )
    return p
