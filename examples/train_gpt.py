"""Train a small GPT on a tokenized dataset; evaluate on the val split's whole documents.

    prep tokenize data/demo-raw/text data/demo-tokens --tokenizer bpe --vocab-size 512
    python examples/train_gpt.py --data data/demo-tokens --epochs 2
    torchrun --nproc-per-node 8 examples/train_gpt.py --data data/gpt2 --compile

The defaults are nanoGPT's shakespeare_char config (6 layers, 6 heads, 384 wide, 256 tokens
of context); `--layers 2 --heads 2 --embd 64 --block 64` trains on a CPU in seconds.
TokenWindowDataset reads (x, y) windows straight from the token memmaps (nanoGPT's uint16
`train.bin`); DocumentDataset gives the val documents one by one, so eval never crosses one.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

if __package__ in (None, ""):  # run as a script: make `examples` importable
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

from examples import common as ex
from loaders import DocumentDataset, TokenWindowDataset, make_loader


class Attention(nn.Module):
    def __init__(self, embd: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(embd, 3 * embd)
        self.proj = nn.Linear(embd, embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Layer(nn.Module):
    """Pre-norm transformer layer: x + attn(ln(x)), then x + mlp(ln(x)), as GPT-2."""

    def __init__(self, embd: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(embd), nn.LayerNorm(embd)
        self.attn = Attention(embd, heads)
        self.mlp = nn.Sequential(nn.Linear(embd, 4 * embd), nn.GELU(), nn.Linear(4 * embd, embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and position embeddings, `layers` layers, a head tied to the token embedding."""

    def __init__(self, vocab: int, block: int, layers: int, heads: int, embd: int):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab, embd)
        self.pos = nn.Embedding(block, embd)
        self.layers = nn.Sequential(*(Layer(embd, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(embd)
        self.head = nn.Linear(embd, vocab, bias=False)
        self.head.weight = self.tok.weight
        for m in self.modules():  # GPT-2's init: small weights, so the first loss is ~log(vocab)
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.layers(self.tok(idx) + self.pos(pos))))


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
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
    ex.checkpoint_options(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[float]:
    """Trains; returns every step's loss."""
    args = options(argv)
    env = ex.setup(args)
    logged = args.sample_log is not None  # batches then end with the windows' indices
    ds = TokenWindowDataset(args.data, block_size=args.block, split="train", index=logged)
    docs = DocumentDataset(args.data, split="val")
    loader = make_loader(ds, args.batch_size, shuffle=True, num_workers=args.workers)
    net = GPT(ds.vocab_size, args.block, args.layers, args.heads, args.embd)
    model = ex.prepare(net, env, args.compile)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    trainer = ex.Trainer(opt, args.limit, env.main)

    def step(batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, int]:
        x, y = (t.to(env.device, torch.int64, non_blocking=True) for t in batch[:2])
        with ex.autocast(env.device):
            return loss_of(model, x, y), len(x)

    if env.main:
        print(
            f"{len(ds)} windows of {args.block} tokens, vocab {ds.vocab_size}; "
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
