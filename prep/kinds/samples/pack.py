"""pack_samples and `prep samples`: samples of any shape, made by the user's function from each
input, packed on the run driver (prep.run.driver) with every guarantee `prep pack` has."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaders.fields import Field, Image, Tokens
from loaders.fields.base import check_name
from loaders.format import ArraySpec, Manifest, Shard
from loaders.format.schema import SAMPLES_VERSION
from prep.fields.encode import PLACED, encode_sample, ordered
from prep.fields.image import arrays_of
from prep.kinds.samples.config import SamplesConfig
from prep.kinds.samples.recipe import check_shippable, load_recipe
from prep.media.image.stats import PixelSums, combine_fields
from prep.run.driver import Inputs, Kind, RunSummary, run, shard_size
from prep.run.errors import PrepError, UsageError
from prep.run.shardwriter import write_shard
from prep.run.tasks import shard_task
from prep.sources.samples import Item, Listing, list_inputs


@shard_task
def pack_samples_shard(
    index: int,
    items: list[Item],
    make: Callable[[Any], Any],
    fields: dict[str, Field],
    specs: dict[str, ArraySpec],
    base: Path | None,
    storage: str,
    staging: Path,
) -> dict[str, Any]:
    """The joblib task: shard `index` of `items` through `make` and the fields; its record
    keeps the pixel sums of each image field (prep.media.image.stats)."""
    sums: dict[str, PixelSums] = {}
    encode = functools.partial(_encode, make=make, fields=fields, base=base, sums=sums)

    def finish(record: dict[str, Any]) -> None:
        record["stats"] = {name: s.record() for name, s in sorted(sums.items())}

    return write_shard(index, items, encode, lambda it: it.rel, specs, storage, staging, finish)


def _encode(
    item: Item,
    make: Any,
    fields: dict[str, Field],
    base: Path | None,
    sums: dict[str, PixelSums],
) -> Any:
    return encode_sample(item.value, make, fields, base, sums)


class SamplesKind(Kind[SamplesConfig, list[Item]]):
    """The user's samples: one function call a sample, then each field's encoder."""

    name = "samples"
    unit = "sample"
    task = staticmethod(pack_samples_shard)
    threads = True  # images decode in C without the GIL; --backend loky for Python-heavy make()
    shard_splits: list[str | None]  # each shard's split, where plan() sets it (importers)

    def __init__(
        self, cfg: SamplesConfig, make: Callable[[Any], Any], fields: dict[str, Any], inputs: Any
    ):
        super().__init__(cfg)
        self.make, self.inputs = make, inputs
        self.fields = ordered(bind_fields(fields))
        self.specs = {
            n: s for name, f in self.fields.items() for n, s in arrays_of(name, f).items()
        }

    def sources(self) -> list[Path]:
        return [Path(self.inputs)] if isinstance(self.inputs, (str, Path)) else []

    def list_inputs(self) -> Inputs:
        self.listing: Listing = list_inputs(self.inputs, self.cfg.limit)
        if not self.listing.items:
            raise PrepError(f"no inputs in {self.cfg.src} ({len(self.listing.rejects)} rejected)")
        if self.cfg.backend != "threads":
            check_shippable(self.make, self.cfg.backend)
        said = [self.listing.fingerprint, _identity(self.make), self.described()]
        digest = hashlib.sha256(repr(said).encode()).hexdigest()
        return Inputs(len(self.listing.items), self.listing.rejects, digest)

    def plan(self) -> list[list[Item]]:
        items = self.listing.items
        size = shard_size(len(items), self.cfg.shard_size)
        return [items[i : i + size] for i in range(0, len(items), size)]

    def prepare(self, staging: Path, resume: bool) -> None:
        for name, f in self.fields.items():  # each tokenizer travels in the dataset
            if isinstance(f, Tokens) and f.tokenizer:
                shutil.copyfile(f.tokenizer, staging / f"{name}.tokenizer.json")

    def task_args(self, index: int, shard: list[Item], staging: Path) -> tuple[Any, ...]:
        base = self.listing.base
        return (index, shard, self.make, self.fields, self.specs, base, self.cfg.format, staging)

    def described(self) -> dict[str, Any]:
        out = {name: f.describe() for name, f in self.fields.items()}
        for name, d in out.items():
            if d["kind"] == "tokens" and d.get("tokenizer"):
                d["tokenizer"] = f"{name}.tokenizer.json"  # the copy in the dataset
        return out

    def reusable(self, record: dict[str, Any]) -> bool:
        return "stats" in record  # a shard of a prep before pixel stats: redone

    def manifest(self, records: list[dict[str, Any]]) -> Manifest:
        extra: dict[str, Any] = {"fields": self.described()}
        images = [name for name, f in self.fields.items() if isinstance(f, Image)]
        splits = getattr(self, "shard_splits", None) or [r["shard"].get("split") for r in records]
        stats = combine_fields(records, images, splits)
        if stats:  # per image field: mean and std per channel at each size, the train split's
            extra["stats"] = stats
        return Manifest(
            kind="samples",
            storage=self.cfg.format,
            arrays=self.specs,
            shards=[Shard.from_dict(rec["shard"]) for rec in records],
            extra=extra,
            format_version=SAMPLES_VERSION,
        )


def bind_fields(fields: Any) -> dict[str, Field]:
    """Check the declared fields (exit 2 for a bad one); a Mask, Boxes or Instances takes its
    image's sizes and mode."""
    if not isinstance(fields, dict) or not fields:
        raise UsageError("fields must be a dict of field name -> field (prep.fields)")
    for name, f in fields.items():
        problem = check_name(name)
        if problem is None and not isinstance(f, Field):
            problem = f"field {name!r} is a {type(f).__name__}, not a field of prep.fields"
        if problem is not None:
            raise UsageError(problem)
    out = dict(fields)
    for name, f in fields.items():
        if isinstance(f, PLACED):
            image = fields.get(f.image)
            if not isinstance(image, Image):
                raise UsageError(f"{f.kind} {name}: image={f.image!r} is not an Image field")
            out[name] = dataclasses.replace(f, sizes=image.sizes, mode=image.mode)
    return out


def _identity(make: Callable[..., Any]) -> str:
    """What the output depends on in the function: its name and, where known, its source."""
    try:
        source = inspect.getsource(make)
    except (OSError, TypeError):
        source = ""
    return f"{getattr(make, '__module__', '')}.{getattr(make, '__qualname__', '')}:{source}"


def pack_samples(
    make: Callable[[Any], Any],
    inputs: Any,
    out: str | Path,
    fields: dict[str, Field],
    *,
    show_progress: bool = True,
    profile: bool = False,
    **options: Any,
) -> RunSummary:
    """Pack one sample per input: `make(input)` returns a dict of the declared `fields`
    (prep.fields), None to skip the input, or raises prep.Reject. `inputs`: a list of objects,
    a .csv/.jsonl/.parquet file (rows as dicts), a .txt of paths, or a folder (paths).
    `options` are `prep samples`' (jobs, backend, overwrite, resume, limit, max_rejects,
    shard_size, format, scheduler, staging).

    >>> # pack_samples(make, "rows.jsonl", "packed", {"image": Image(sizes=(256,))}, jobs=2)
    """
    src = str(inputs) if isinstance(inputs, (str, Path)) else f"<{len(inputs)} objects>"
    try:
        cfg = SamplesConfig(src=src, out=str(out), **options)
    except TypeError as e:
        raise UsageError(f"pack_samples: {e}") from None
    return run(SamplesKind(cfg, make, fields, inputs), show_progress, profile)


def pack_recipe(
    cfg: SamplesConfig, show_progress: bool = True, profile: bool = False
) -> RunSummary:
    """`prep samples SRC OUT --recipe FILE`: FILE's FIELDS and make()."""
    if not cfg.recipe:
        raise UsageError("prep samples needs --recipe FILE (a .py defining FIELDS and make)")
    make, fields = load_recipe(Path(cfg.recipe))
    return run(SamplesKind(cfg, make, fields, cfg.src), show_progress, profile)
