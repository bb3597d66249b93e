"""PackedDataset: a token split's documents packed into sequences of `seq_len`, each document
attending only to itself (loaders.packing has the plans, the masks and the collate)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import torch

from loaders.datasets.base import Remote
from loaders.datasets.tokens import _TokenSplit
from loaders.fields.tokens import LOSS_MASK
from loaders.format import OFFSETS
from loaders.packing import IGNORE, STRATEGIES, WINDOW, Plan, load_plan, packing_name, plan
from loaders.read.buffers import new_batch
from loaders.read.loader import Batch
from loaders.read.store import LocalBackend

FIELDS = ("input_ids", "labels", "position_ids", "document_ids", "cu_seqlens")
GRID = FIELDS[:4]  # (B, seq_len) each; cu_seqlens is ragged
SLICED = 256  # up to this many spans a batch are copied one by one; more, in one gather a shard


def _packings(split: str | None) -> str:
    """The glob of a split's stored packings, at any seq_len."""
    return packing_name(split or "", 0).replace("-0.", "-*.")


def _listed(storage: Any, pattern: str) -> list[str]:
    """The names under a URL's folder that match `pattern`: none where it cannot list (an
    HTTP server that shows no folder pages)."""
    folder, names = pattern.split("/")
    try:
        found = storage.fs.glob(f"{storage.url(folder)}/{names}")
    except (OSError, ValueError):
        return []
    return [str(f).rsplit("/", 1)[1] for f in found]


class PackedBatch(Batch):
    """A batch as a dict of FIELDS (cu_seqlens flattened); item j: row j's own dict."""

    def __init__(self, fields: dict[str, torch.Tensor], seq_len: int):
        self.tensors, self.seq_len = fields, seq_len  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.tensors["input_ids"])  # type: ignore[call-overload]

    def __getitem__(self, j: int | str) -> Any:  # type: ignore[override]
        fields: dict[str, torch.Tensor] = self.tensors  # type: ignore[assignment]
        if isinstance(j, str):
            return fields[j]
        cu = fields["cu_seqlens"]
        lo, hi = j * self.seq_len, (j + 1) * self.seq_len
        row = cu[(cu >= lo) & (cu <= hi)] - lo
        return {k: fields[k][j] for k in GRID} | {"cu_seqlens": row}


class PackedDataset(_TokenSplit):
    """Item i: packed sequence i of the epoch's plan, a dict of `seq_len` tokens each: input_ids,
    labels (the next token; IGNORE (-100) at each span's last token, on padding, and where the
    next token is outside the loss mask of chat data), position_ids (from 0 in each span; with
    `continue_positions`, a cut document's pieces go on counting), document_ids (the document's
    index in the split, -1 on padding) and cu_seqlens (int32; a batch's index the flattened
    batch). Every document's tokens (its end-of-document token in) are read once an epoch.

    best_fit and greedy plan again each epoch (`set_epoch`, or make_loader's sampler, which
    sets it as a pass starts): the number of sequences may change by a few. concat does not.
    A packing `prep tokenize --pack seq_len` stored (best_fit; in the folder or at the URL) is
    used for every epoch instead (`seed` then plays no part: the sampler orders); `stored=False`
    plans.

    Examples:
        >>> from loaders import PackedDataset, make_loader
        >>> ds = PackedDataset("data/demo-tokens", seq_len=128, split="train", seed=0)
        >>> batch = next(iter(make_loader(ds, batch_size=4)))
        >>> batch["input_ids"].shape, batch["cu_seqlens"].dtype, int(batch["cu_seqlens"][0])
        (torch.Size([4, 128]), torch.int32, 0)
    """

    dicts = True
    holds = FIELDS

    def __init__(
        self,
        root: str | os.PathLike[str],
        seq_len: int,
        split: str = "train",
        strategy: str = "best_fit",
        seed: int = 0,
        *,
        window: int | None = WINDOW,
        continue_positions: bool = False,
        pad_id: int | None = None,
        stored: bool = True,
        **store: Unpack[Remote],
    ):
        super().__init__(root, split, **store)
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
        if seq_len < 2:
            raise ValueError(f"seq_len {seq_len} must be at least 2 (a token and its label)")
        self.seq_len, self.strategy, self.seed, self.window = seq_len, strategy, seed, window
        self.continue_positions = continue_positions
        self.pad_id = (self.eot_id or 0) if pad_id is None else pad_id
        self._plans: dict[int, Plan] = {}
        self.stored = self._stored() if stored and strategy == "best_fit" else None

    def __getstate__(self) -> dict[str, Any]:  # each process plans for itself
        return {**super().__getstate__(), "_plans": {}}

    @cached_property
    def lengths(self) -> np.ndarray:
        """Each document's tokens, int64 (documents,), its end-of-document token in."""
        parts = [np.diff(self.arrays.array(s, "tokens" + OFFSETS)) for s in self._shards]
        return np.concatenate(parts).astype(np.int64)

    @cached_property
    def _doc_starts(self) -> np.ndarray:  # each document's first token in the split's stream
        return np.cumsum(self.lengths) - self.lengths

    @cached_property
    def _masked(self) -> bool:
        return LOSS_MASK in self.store.manifest.arrays

    def plan(self, epoch: int | None = None) -> Plan:
        """The epoch's plan (default: the current one), made once a process and epoch."""
        e = self.epoch if epoch is None else epoch
        if self.strategy == "concat":
            e = 0  # the same every epoch
        if self.stored is not None:
            return self._load()
        found = self._plans.get(e)
        if found is None:
            found = plan(self.lengths, self.seq_len, self.strategy, self.seed, e, self.window)
            self._plans = {e: found}  # one epoch kept: workers plan each anew
        return found

    def _stored(self) -> Path | str | None:
        """Where `prep tokenize --pack` stored this split's packing at this seq_len (the folder's
        file, or its URL), if it did; stored ones at other lengths only: that this one plans,
        said once."""
        name = packing_name(self.split or "", self.seq_len)
        backend = self.store.backend
        if isinstance(backend, LocalBackend):
            root = Path(backend.root)
            if (root / name).is_file():
                return root / name
            others = [p.name for p in root.glob(_packings(self.split))]
        else:  # a URL: one request, and one more to list the others where it can list
            storage = backend.storage  # type: ignore[attr-defined]
            if storage.info(name) is not None:
                return str(storage.url(name))
            others = _listed(storage, _packings(self.split))
        tails = (n.rsplit("-", 1)[1].removesuffix(".npz") for n in others)
        have = ", ".join(map(str, sorted(int(t) for t in tails if t.isdigit())))
        if have:
            print(
                f"{self.store.root}: stored packings are for seq_len {have}, not "
                f"{self.seq_len}: planning best_fit each epoch (prep tokenize --pack "
                f"{self.seq_len} stores one)",
                file=sys.stderr,
            )
        return None

    def _load(self) -> Plan:
        found = self._plans.get(-1)
        if found is None:  # a process reads and checks it once; every epoch uses it
            assert self.stored is not None
            backend, where = self.store.backend, self.stored
            data = None  # a URL's is read whole: it is not in the manifest, nor in the cache
            if not isinstance(backend, LocalBackend):
                name = packing_name(self.split or "", self.seq_len)
                data = backend.storage.read(name)  # type: ignore[attr-defined]
            found = load_plan(where, self.lengths, self.seq_len, data)
            self._plans[-1] = found
        return found

    def start_epoch(self, epoch: int) -> list[int]:
        """A sampler starts a pass of `epoch`: that epoch is planned; its shard_sizes."""
        self.set_epoch(epoch)
        return self.shard_sizes

    @property
    def shard_sizes(self) -> list[int]:  # one run of sequences: they have no shard
        return [len(self)]

    def __len__(self) -> int:
        return len(self.plan())

    def _gather(self, name: str, starts: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Array `name` (ragged like the tokens) at spans (stream start, length), end to end;
        a span is in one shard (a document is)."""
        k = np.searchsorted(self._token_starts, starts, side="right") - 1
        if len(k) <= SLICED:  # few spans (long documents): a slice copy each
            local = (starts - self._token_starts[k]).tolist()
            out = np.empty(int(length.sum()), self.store.manifest.arrays[name].dtype)
            at = 0
            for shard, a, n in zip(k.tolist(), local, length.tolist(), strict=True):
                out[at : at + n] = self.arrays.array(self._shards[shard], name)[a : a + n]
                at += n
            return out
        before = np.cumsum(length) - length
        src = np.repeat(starts - self._token_starts[k] - before, length)
        src += np.arange(len(src))  # token t of the spans: shard position src[t]
        if len(k) and k[0] == k[-1] and (k == k[0]).all():  # one shard: one gather
            return self.arrays.array(self._shards[int(k[0])], name)[src]
        out = np.empty(len(src), self.store.manifest.arrays[name].dtype)
        for shard in np.unique(k).tolist():
            rows = np.flatnonzero(np.repeat(k == shard, length))
            out[rows] = self.arrays.array(self._shards[shard], name)[src[rows]]
        return out

    def __getitems__(self, indices: Sequence[int]) -> PackedBatch:
        p = self.plan()
        idx = self._checked(indices, len(p))
        b, width = len(idx), self.seq_len
        first, n = p.starts[idx], p.starts[idx + 1] - p.starts[idx]
        span = np.repeat(first - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
        doc, length, offset = p.doc[span], p.length[span], p.offset[span]
        used = np.add.reduceat(length, np.cumsum(n) - n) if len(span) else np.zeros(b, np.int64)
        out = {f: new_batch((b, width), torch.int64, key=f) for f in GRID}
        grid = [out[f].numpy().reshape(-1) for f in GRID]
        full = bool((used == width).all())  # no padding (best_fit's usual batch)
        # The batch's tokens in order: written into the rows as they are when no row is padded
        ids = self._gather("tokens", self._doc_starts[doc] + offset, length)
        ends = np.cumsum(length) - 1  # each span's last token
        if full:
            grid[0][:] = ids
            labels = grid[1]
        else:
            labels = np.empty(len(ids), np.int64)
        labels[:-1] = (grid[0] if full else ids)[1:]
        labels[ends] = IGNORE  # no token predicts across a boundary
        if self._masked:  # position t predicts token t + 1: trained where that one is
            mask = self._gather(LOSS_MASK, self._doc_starts[doc] + offset, length)
            labels[:-1][mask[1:] == 0] = IGNORE
        pos = np.arange(len(ids)) - np.repeat(ends + 1 - length, length)  # from 0 in each span
        if self.continue_positions:
            pos += np.repeat(offset, length)
        if full:
            grid[2][:], grid[3][:] = pos, np.repeat(doc, length)
        else:
            self._place(grid, used, (ids, labels, pos, np.repeat(doc, length)))
        row_of = np.repeat(np.arange(b), n)
        span_end = ends + 1 - np.repeat(np.cumsum(used) - used, n) + row_of * width
        pads = (np.flatnonzero(used < width) + 1) * width
        cu = np.concatenate([[0], span_end, pads])
        out["cu_seqlens"] = torch.from_numpy(np.sort(cu).astype(np.int32))
        return PackedBatch(out, width)

    def _place(
        self, grid: list[np.ndarray], used: np.ndarray, values: tuple[np.ndarray, ...]
    ) -> None:
        """Rows of `used` tokens each, then padding: pad_id, IGNORE, 0.., -1."""
        width = self.seq_len
        cut = np.concatenate([[0], np.cumsum(used)])
        rows = [g.reshape(-1, width) for g in grid]
        for r, u in enumerate(used.tolist()):
            for g, v in zip(rows, values, strict=True):
                g[r, :u] = v[cut[r] : cut[r + 1]]
            rows[0][r, u:], rows[1][r, u:], rows[3][r, u:] = self.pad_id, IGNORE, -1
            rows[2][r, u:] = np.arange(width - u)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.__getitems__([index])[0]

    def _shown(self) -> dict[str, Any]:
        said = dict(seq_len=self.seq_len, split=self.split, strategy=self.strategy)
        return said | dict(sequences=len(self), documents=len(self.lengths), tokens=self.num_tokens)
