"""Train a small GPT on a tokenized dataset; evaluate on the val split's whole documents.

    prep tokenize data/demo-raw/text data/demo-tokens --tokenizer bpe --vocab-size 512
    python examples/train_gpt.py --data data/demo-tokens --epochs 2
    torchrun --nproc-per-node 8 examples/train_gpt.py --data data/gpt2 --compile
    python examples/train_gpt.py --data data/demo-tokens --packed   # documents packed apart

The defaults are nanoGPT's shakespeare_char config (6 layers, 6 heads, 384 wide, 256 tokens
of context); `--layers 2 --heads 2 --embd 64 --block 64` trains on a CPU in seconds.
TokenWindowDataset reads (x, y) windows straight from the token memmaps (nanoGPT's uint16
`train.bin`); DocumentDataset gives the val documents one by one, so eval never crosses one.
With --packed, PackedDataset packs whole documents into each block instead, and the block mask
(loaders.packing) with its position_ids keeps every document's attention to itself.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from examples import common as ex
from loaders import DocumentDataset, PackedDataset, TokenWindowDataset, make_loader
from loaders.packing import block_mask


class Attention(nn.Module):
    def __init__(self, embd: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(embd, 3 * embd)
        self.proj = nn.Linear(embd, embd)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(  # a mask (packed documents) carries the causality
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask, is_causal=mask is None
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Layer(nn.Module):
    """Pre-norm transformer layer: x + attn(ln(x)), then x + mlp(ln(x)), as GPT-2."""

    def __init__(self, embd: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(embd), nn.LayerNorm(embd)
        self.attn = Attention(embd, heads)
        self.mlp = nn.Sequential(nn.Linear(embd, 4 * embd), nn.GELU(), nn.Linear(4 * embd, embd))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and position embeddings, `layers` layers, a head tied to the token embedding."""

    def __init__(self, vocab: int, block: int, layers: int, heads: int, embd: int):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab, embd)
        self.pos = nn.Embedding(block, embd)
        self.layers = nn.ModuleList(Layer(embd, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab, bias=False)
        self.head.weight = self.tok.weight
        for m in self.modules():  # GPT-2's init: small weights, so the first loss is ~log(vocab)
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def forward(
        self, idx: torch.Tensor, pos: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits; packed documents: `pos` their position_ids, `mask` packing.block_mask's."""
        if pos is None:
            pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.ln(x))


def loss_of(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *packing: torch.Tensor
) -> torch.Tensor:
    """Mean loss over the labels of `y` (-100: none, cross_entropy's ignore_index)."""
    logits = model(x, *packing)  # packing: position_ids and the block mask
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def evaluate(model: nn.Module, docs: DocumentDataset, block: int, env: ex.Env) -> float:
    """Mean loss per token over the val documents, each cut into windows of `block`."""
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad(), ex.autocast(env.device):
        for i in range(env.rank, len(docs), env.world):
            tokens = docs[i].to(env.device, torch.int64)
            for s in range(0, len(tokens) - 1, block):
                x, y = tokens[s : s + block], tokens[s + 1 : s + block + 1]
                x = x[: len(y)]
                total += float(loss_of(model, x[None], y[None])) * len(y)
                count += len(y)
    model.train()
    return total / max(1, count)


def options(argv: Sequence[str] | None) -> argparse.Namespace:
    p = ex.parser(__doc__.split("\n")[0], batch_size=32, lr=1e-3, epochs=2)
    p.add_argument("--block", type=int, default=256, help="context length in tokens")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--embd", type=int, default=384)
    p.add_argument("--packed", action="store_true", help="PackedDataset: documents kept apart")
    ex.checkpoint_options(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[float]:
    """Trains; returns every step's loss."""
    args = options(argv)
    env = ex.setup(args)
    logged = args.sample_log is not None  # batches then end with the windows' indices
    if args.packed:
        ds: Any = PackedDataset(args.data, args.block, split="train", seed=args.seed)
    else:
        ds = TokenWindowDataset(args.data, block_size=args.block, split="train", index=logged)
    docs = DocumentDataset(args.data, split="val")
    loader = make_loader(ds, args.batch_size, shuffle=True, num_workers=args.workers)
    net = GPT(ds.vocab_size, args.block, args.layers, args.heads, args.embd)
    model = ex.prepare(net, env, args.compile)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    trainer = ex.Trainer(opt, args.limit, env.main)

    def step(batch: Any) -> tuple[torch.Tensor, int]:
        if args.packed:  # cu_seqlens as the mask; a FlashAttention varlen kernel takes them as is
            mask = block_mask(batch["cu_seqlens"], args.block)
            x, y, pos, mask = (
                t.to(env.device, non_blocking=True)
                for t in (batch["input_ids"], batch["labels"], batch["position_ids"], mask)
            )
            with ex.autocast(env.device):
                return loss_of(model, x, y, pos, mask), len(x)
        x, y = (t.to(env.device, torch.int64, non_blocking=True) for t in batch[:2])
        with ex.autocast(env.device):
            return loss_of(model, x, y), len(x)

    if env.main:
        print(
            f"{len(ds)} {'sequences' if args.packed else 'windows'} of {args.block} tokens, "
            f"vocab {ds.vocab_size}; "
            f"uniform loss {math.log(ds.vocab_size):.3f}"
        )
    saved = {"model": net, "optimizer": opt, "loader": loader}
    start = ex.Checkpoint(args, env, saved, trainer, ids=lambda batch: batch[2]).resume()
    for epoch in trainer.epochs(args.epochs, start):
        loader.sampler.set_epoch(epoch)  # the resumed epoch's: its rest
        stats = trainer.epoch(loader, step)
        ex.report(env, epoch, stats, f", val loss {evaluate(model, docs, args.block, env):.3f}")
    ex.teardown()
    return trainer.losses


if __name__ == "__main__":
    main()
