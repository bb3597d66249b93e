"""What every training example shares: options, device and DDP set-up, the timed loop, logging.

The loop measures, per epoch, samples/s and the data-wait fraction: the share of the step time
spent blocked on the loader's next batch (the article's first measurement). On CUDA the loss is
read back every step (`step N loss X`), which synchronises, so a step's time is its real time.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, Subset

Step = Callable[[Any], tuple[torch.Tensor, int]]  # batch -> (loss, samples in it)


def parser(description: str, **defaults: Any) -> argparse.ArgumentParser:
    """The options every example takes; `defaults` overrides their values per example."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", help="the packed dataset folder")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    p.add_argument(
        "--limit", type=int, default=0, help="run N training steps, then stop (0: --epochs)"
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.set_defaults(**defaults)
    return p


@dataclass
class Env:
    """Where this process trains: its device and, under torchrun, its rank among `world`."""

    device: torch.device
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup(args: argparse.Namespace) -> Env:
    """One process, or one rank of a torchrun launch (WORLD_SIZE > 1): then the process group
    is initialised (nccl on CUDA, gloo on CPU) and make_loader shares each epoch between ranks."""
    torch.manual_seed(args.seed)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Env(torch.device(args.device))
    local = int(os.environ["LOCAL_RANK"])
    cuda = args.device.startswith("cuda")
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
    return Env(device, torch.distributed.get_rank(), world)


def teardown() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def prepare(model: nn.Module, env: Env, compile: bool, channels_last: bool = False) -> nn.Module:
    """The model on its device (channels-last if asked), compiled if asked, in DDP under
    torchrun. Returns the module to call; the optimiser takes `model.parameters()` either way."""
    model = model.to(env.device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    if compile:
        model = torch.compile(model)  # type: ignore[assignment]
    if env.world > 1:
        ids = [env.device.index] if env.device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    return model


def autocast(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on CUDA only: on the CPU the examples train in float32."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def holdout(ds: Dataset[Any], every: int = 8) -> tuple[Subset[Any], Subset[Any]]:
    """(train, val): every `every`-th sample held out for validation. Image datasets have no
    stored split; Subset keeps the dataset's whole-batch reads (`__getitems__`)."""
    n = len(ds)  # type: ignore[arg-type]
    val = list(range(every - 1, n, every))
    held = set(val)
    return Subset(ds, [i for i in range(n) if i not in held]), Subset(ds, val)


def image_dataset(root: str, fields: Sequence[str]) -> Any:
    """An ImageShardDataset of `fields` at the largest size packed (set_size switches it)."""
    from loaders import ImageShardDataset, load_manifest

    return ImageShardDataset(root, size=max(load_manifest(root).sizes()), fields=fields)


def to_device(batch: Sequence[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    return [t.to(device, non_blocking=True) for t in batch]


@dataclass
class Stats:
    """One epoch's counters: seconds waiting for data, seconds in all, samples, losses."""

    wait: float = 0.0
    total: float = 0.0
    samples: int = 0
    losses: list[float] = field(default_factory=list)

    def line(self) -> str:
        rate = self.samples / self.total if self.total else 0.0
        wait = self.wait / self.total if self.total else 0.0
        loss = sum(self.losses) / max(1, len(self.losses))
        return f"{rate:,.0f} samples/s, data wait {wait:.1%}, loss {loss:.3f}"


def timed(loader: Iterable[Any], stats: Stats) -> Iterator[Any]:
    """The loader's batches; the time blocked in `iter` (workers start or reset: persistent
    ones resume) and in `next`, the last call that ends the epoch included, is data wait."""
    start = time.perf_counter()
    it = iter(loader)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            stats.wait += time.perf_counter() - start
            return
        stats.wait += time.perf_counter() - start
        yield batch
        start = time.perf_counter()


class Trainer:
    """Runs epochs of `step` over a loader, prints `step N loss X` and stops after `limit`
    steps (0: never). `losses` holds every step's loss, for tests and plots."""

    def __init__(self, optimizer: torch.optim.Optimizer, limit: int = 0, log: bool = True):
        self.optimizer, self.limit, self.log = optimizer, limit, log
        self.steps = 0
        self.losses: list[float] = []
        self.on_step: Callable[[Any], None] | None = None  # after each step, with its batch

    @property
    def done(self) -> bool:
        return bool(self.limit) and self.steps >= self.limit

    def epochs(self, count: int, start: int = 0) -> Iterator[int]:
        """Epoch numbers from `start` (resumed) to `count`, or with a limit as its steps take."""
        epoch = start
        while (epoch < count or self.limit) and not self.done:
            yield epoch
            epoch += 1

    def epoch(self, loader: Iterable[Any], step: Step) -> Stats:
        stats = Stats()
        start = time.perf_counter()
        for batch in timed(loader, stats):
            loss, n = step(batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            value = float(loss.detach())  # reading it back synchronises the device
            self.steps += 1
            stats.samples += n
            stats.losses.append(value)
            self.losses.append(value)
            if self.log:
                print(f"step {self.steps} loss {value:.3f}", flush=True)
            if self.on_step is not None:
                self.on_step(batch)
            if self.done:
                break
        stats.total = time.perf_counter() - start
        return stats


def report(env: Env, epoch: int, stats: Stats, extra: str = "") -> None:
    if env.main:
        print(f"epoch {epoch}: {stats.line()}{extra}", flush=True)


def conv_block(cin: int, cout: int, dims: int) -> nn.Sequential:
    """Two (conv 3, norm, ReLU) in 2-D or 3-D: the unit of the U-Nets and the ResNet stem."""
    conv = nn.Conv2d if dims == 2 else nn.Conv3d
    norm = nn.BatchNorm2d if dims == 2 else nn.BatchNorm3d
    return nn.Sequential(
        conv(cin, cout, 3, padding=1, bias=False),
        norm(cout),
        nn.ReLU(inplace=True),
        conv(cout, cout, 3, padding=1, bias=False),
        norm(cout),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    """A small U-Net, 2-D (B, C, H, W) or 3-D (B, C, D, H, W): `depth` halvings of the grid,
    widths doubling from `width`; logits (B, classes, ...) at the input's size. Sides must be
    divisible by 2**depth."""

    def __init__(self, cin: int, classes: int, width: int = 16, depth: int = 2, dims: int = 2):
        super().__init__()
        widths = [width * 2**i for i in range(depth + 1)]
        self.down = nn.ModuleList(
            conv_block(a, b, dims) for a, b in zip([cin, *widths[:-2]], widths[:-1], strict=True)
        )
        self.bottom = conv_block(widths[-2], widths[-1], dims)
        up = nn.ConvTranspose2d if dims == 2 else nn.ConvTranspose3d
        self.ups = nn.ModuleList(up(b, a, 2, stride=2) for a, b in itertools.pairwise(widths))
        self.up_blocks = nn.ModuleList(conv_block(2 * a, a, dims) for a in widths[:-1])
        self.pool = nn.MaxPool2d(2) if dims == 2 else nn.MaxPool3d(2)
        conv = nn.Conv2d if dims == 2 else nn.Conv3d
        self.head = conv(width, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottom(x)
        for i in reversed(range(len(skips))):
            x = self.up_blocks[i](torch.cat([skips[i], self.ups[i](x)], dim=1))
        return self.head(x)


def segmentation_eval(
    model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], classes: int
) -> tuple[float, float]:
    """(pixel accuracy, mean IoU over the classes present) of model(x) against integer y."""
    inter = torch.zeros(classes)
    union = torch.zeros(classes)
    right = total = 0
    model.eval()
    with torch.no_grad():
        for x, y in batches:
            pred = model(x).argmax(1)
            right += int((pred == y).sum())
            total += y.numel()
            for c in range(classes):
                p, t = pred == c, y == c
                inter[c] += float((p & t).sum())
                union[c] += float((p | t).sum())
    model.train()
    present = union > 0
    miou = float((inter[present] / union[present]).mean()) if present.any() else 0.0
    return right / max(1, total), miou


def checkpoint_options(p: argparse.ArgumentParser) -> None:
    """The options of `Checkpoint`."""
    p.add_argument("--checkpoint", metavar="CKPT", help="write the run's state here (rank 0)")
    p.add_argument("--checkpoint-every", type=int, default=100, metavar="N", help="in steps")
    p.add_argument("--resume", metavar="CKPT", help="go on from a --checkpoint file")
    p.add_argument(
        "--sample-log", metavar="FILE", help="append each step's sample indices (FILE.RANK)"
    )


class Checkpoint:
    """A run's state in one file: the model's, the optimiser's, the loader's (where it is in
    its epoch: a run resumed on other GPU or worker counts reads the rest of that epoch) and
    the step count. Rank 0 writes it (every rank's loader state is the same) to a temp name,
    then renames it: a kill mid-write leaves the last one whole."""

    def __init__(
        self,
        args: argparse.Namespace,
        env: Env,
        parts: dict[str, Any],
        trainer: Trainer,
        ids: Callable[[Any], torch.Tensor] | None = None,
    ):
        self.args, self.env, self.parts, self.trainer, self.ids = args, env, parts, trainer, ids
        trainer.on_step = self.step

    def resume(self) -> int:
        """Load --resume's file (none: start afresh); the epoch to start at."""
        if not self.args.resume:
            return 0
        saved = torch.load(self.args.resume, map_location="cpu", weights_only=True)
        for name, part in self.parts.items():
            part.load_state_dict(saved[name])
        self.trainer.steps = saved["steps"]
        if self.env.main:
            print(f"resumed at step {saved['steps']} from {self.args.resume}", flush=True)
        return int(saved["loader"]["epoch"])

    def step(self, batch: Any) -> None:
        if self.args.sample_log and self.ids is not None:
            log = f"{self.args.sample_log}{'' if self.env.world == 1 else f'.{self.env.rank}'}"
            with open(log, "a") as f:
                f.write(f"{self.trainer.steps} {' '.join(map(str, self.ids(batch).tolist()))}\n")
        every = self.args.checkpoint_every
        if self.args.checkpoint and self.env.main and self.trainer.steps % every == 0:
            state = {name: part.state_dict() for name, part in self.parts.items()}
            tmp = f"{self.args.checkpoint}.tmp"
            torch.save({**state, "steps": self.trainer.steps}, tmp)
            os.replace(tmp, self.args.checkpoint)
