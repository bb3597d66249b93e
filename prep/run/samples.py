"""The samples run: the engine of every command that writes samples with fields (`prep samples`,
`prep audio`, `prep video`, `prep import ...`). A command lists `Item`s, declares its fields and
gives the function that makes an input's samples; the engine writes a shard per split and the
version 4 manifest (docs/format.md)."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import stat
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from loaders.fields import Field, Image, Mask, Text, Tokens
from loaders.fields.base import FieldError, check_name, encode_source
from loaders.format import ArraySpec
from prep.run import classmaps
from prep.run.errors import Reject as UserReject
from prep.run.errors import UsageError
from prep.run.grow import Parent
from prep.run.inputs import Reject
from prep.run.kind import Kind, array_specs
from prep.run.sharding import split_shards
from prep.run.shardwriter import shard_task, write_shard

SOURCE = "source"  # the field of each sample's input, where a command stores it
Sample = dict[str, Any]  # field name -> its value, as a command's function makes it
Make = Callable[[Any], "Sample | list[Sample] | None"]  # an input -> its sample(s), or None


@dataclass(frozen=True)
class Item:
    """One input: its reject name, the value `make` is given, its split, its `source`."""

    rel: str
    value: Any
    split: str | None = None
    source: str | None = None


@dataclass(frozen=True)
class Source(Text):
    """The `source` field: an input's name, stored as `prep pack` stores a path."""

    def to_bytes(self, value: Any) -> bytes:
        if isinstance(value, str):
            return bytes(encode_source(value))
        return super().to_bytes(value)


@runtime_checkable
class Counting(Protocol):
    """A field that counts what it stores (Image: its pixels) for the manifest's
    `extra.stats[NAME]`: per sample, per shard (`counter()`), then from the shards' records."""

    def encode_counted(self, value: Any) -> tuple[dict[str, np.ndarray], Any]: ...

    def counter(self) -> Any: ...

    def stats(self, records: list[dict[str, Any]]) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class UserFunction:
    """A user's function: value -> a dict of the fields, or None; what it raises is a reject."""

    fn: Callable[[Any], Any]

    def __call__(self, item: Item) -> Sample | None:
        try:
            sample = self.fn(item.value)
        except UserReject as r:
            raise Reject(r.code, str(r)) from None
        except Exception as e:  # the user's code: any failure is this input's reject
            raise Reject("function_error", f"{self.name} raised {type(e).__name__}: {e}") from None
        if sample is not None and not isinstance(sample, dict):
            raise Reject(
                "not_a_sample", f"{self.name} returned a {type(sample).__name__}, not a dict"
            )
        return sample

    @property
    def name(self) -> str:
        return f"{getattr(self.fn, '__qualname__', type(self.fn).__name__)}()"


def encode_sample(
    sample: Sample, fields: dict[str, Field], base: Path | None, counting: Collection[str] = ()
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays of one sample, and what each `counting` field counted; Reject naming the
    field of a value that does not fit. An image or mask path is relative to `base`."""
    missing = [n for n in fields if n not in sample]
    extra = [str(n) for n in sample if n not in fields]
    if missing or extra:
        what = f"field {missing[0]} is missing" if missing else f"field {extra[0]} is not declared"
        raise Reject(
            "field_missing" if missing else "field_extra", f"{what} (declared: {list(fields)})"
        )
    out: dict[str, np.ndarray] = {}
    uprights: dict[str, tuple[int, int]] = {}
    counted: dict[str, Any] = {}
    for name, field in fields.items():  # images before their placed fields
        v = sample[name]
        if isinstance(field, (Image, Mask)) and isinstance(v, (str, Path)) and base is not None:
            v = base / v  # an absolute path stays as it is
        try:
            if field.placed:  # placed like their image (prep.fields)
                on = uprights[field.image]  # type: ignore[attr-defined]
                got = field.encode_for(v, on)  # type: ignore[attr-defined]
            elif name in counting:
                got, counted[name] = field.encode_counted(v)  # type: ignore[attr-defined]
            else:
                got = field.encode(v)
        except FieldError as e:
            raise Reject(e.code, f"field {name}: {e}") from None
        except Reject as r:
            raise Reject(r.code, f"field {name}: {r.message}") from None
        upright = got.pop("upright", None)
        if upright is not None:
            uprights[name] = (int(upright[0]), int(upright[1]))
        out |= {name + suffix: arr for suffix, arr in got.items()}
    return out, counted


@shard_task
def samples_shard(
    index: int,
    items: list[Any],
    make: Make,
    fields: dict[str, Field],
    specs: dict[str, ArraySpec],
    base: Path | None,
    storage: str,
    staging: Path,
    sourced: bool,
) -> dict[str, Any]:
    """Shard `index` of `items` (one split's); its record keeps the counting fields' `stats`."""
    counters = {n: f.counter() for n, f in fields.items() if isinstance(f, Counting)}

    def encode(item: Any) -> list[dict[str, np.ndarray]] | None:
        made = make(item)
        if made is None:
            return None
        samples = made if isinstance(made, list) else [made]
        if sourced:
            samples = [{**s, SOURCE: getattr(item, "source", None) or item.rel} for s in samples]
        encoded = [encode_sample(s, fields, base, counters) for s in samples]
        for _, counted in encoded:  # the input is whole: its samples count
            for name, what in counted.items():
                counters[name].add(what)
        return [arrays for arrays, _ in encoded]

    def stats() -> dict[str, Any]:
        return {"stats": {name: c.record() for name, c in sorted(counters.items())}}

    return write_shard(index, items, encode, specs, storage, staging, stats)


class SamplesRun(Kind[Any, list[Any]]):
    """A command that writes samples with fields: a subclass sets `name` (the manifest's
    `command`), `make` and `items` (`base`: their folder) and declares its fields. `sourced`:
    add `source`, each sample's Item.source or rel."""

    name: ClassVar[str] = "samples"
    unit = "sample"
    task = staticmethod(samples_shard)
    threads = True  # images decode in C without the GIL; --backend loky for Python-heavy make()
    sourced: ClassVar[bool] = False
    # --append: class lists come from the inputs (folders, a source's categories), so a new
    # class may sort anywhere; it is put last (old ids kept) and the listed ids renamed.
    grows_classes: ClassVar[bool] = False
    make: Make
    items: list[Any]
    base: Path | None = None
    specs: dict[str, ArraySpec]

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.command = self.name

    def declare(self, fields: Any) -> None:
        bound = bind_fields(fields)
        if self.sourced:
            if SOURCE in bound:
                raise UsageError(f"field name {SOURCE!r} is taken: {self.command} stores the input")
            bound[SOURCE] = Source()
        # images first: each placed field's image is encoded before it
        self.fields = dict(sorted(bound.items(), key=lambda kv: kv[1].placed))
        self.specs = array_specs(self.fields, self.cfg)

    def plan(self) -> list[list[Any]]:
        splits = dict.fromkeys(getattr(it, "split", None) for it in self.items)
        return split_shards(self.items, list(splits), self.cfg.shard_size)

    def prepare(self, staging: Path, resume: bool) -> None:
        for name, f in self.fields.items():  # each tokenizer travels in the dataset
            if isinstance(f, Tokens) and f.tokenizer:
                shutil.copyfile(f.tokenizer, staging / f"{name}.tokenizer.json")

    def task_args(self, index: int, shard: list[Any], staging: Path) -> tuple[Any, ...]:
        fmt, sourced = self.cfg.format, self.sourced
        return (index, shard, self.make, self.fields, self.specs, self.base, fmt, staging, sourced)

    def described(self) -> dict[str, Any]:
        out = super().described()
        for name, d in out.items():
            if d["kind"] == "tokens" and d.get("tokenizer"):
                d["tokenizer"] = f"{name}.tokenizer.json"  # the copy in the dataset
        return out

    def reusable(self, record: dict[str, Any]) -> bool:
        return "stats" in record  # a shard of a prep before pixel stats: redone

    def identities(self) -> dict[str, str]:
        return {it.rel: identity(it.value, self.base) for it in self.items}

    def grow(self, parent: Parent, fresh: set[str]) -> int:
        self.parent = parent
        self.items = [it for it in self.items if it.rel in fresh]
        if self.grows_classes:
            self.fields, moved = classmaps.grown_labels(self.fields, parent.manifest)
            if moved:
                self.make = classmaps.Renamed(self.make, moved)
            self.specs = array_specs(self.fields, self.cfg)
        return len(self.items)

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        stats = {}
        for name, f in self.fields.items():
            if isinstance(f, Counting):
                parts = [
                    {"shard": r["shard"], "stats": r.get("stats", {}).get(name, {})}
                    for r in self.before(records)
                ]
                got = f.stats(parts)
                if got is not None:
                    stats[name] = got
        return {"stats": stats} if stats else {}


def identity(value: Any, base: Path | None) -> str:
    """What makes an input the same one for --append: a file's size and time where `value`
    names a file, else the sha256 of its repr (a row, an object)."""
    if isinstance(value, (str, Path)):
        path = Path(value) if base is None else base / value
        try:
            st = path.stat()
            if stat.S_ISREG(st.st_mode):
                return f"{st.st_size}:{st.st_mtime_ns}"
        except (OSError, ValueError):  # not a path: a value like any other
            pass
    return hashlib.sha256(repr(value).encode()).hexdigest()


def bind_fields(fields: Any) -> dict[str, Field]:
    """The fields checked (exit 2); a placed field takes its image's sizes and mode."""
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
        if f.placed:
            image = fields.get(f.image)
            if not isinstance(image, Image):
                raise UsageError(f"{f.kind} {name}: image={f.image!r} is not an Image field")
            out[name] = dataclasses.replace(f, sizes=image.sizes, mode=image.mode)
    return out


def check_shippable(make: Callable[..., Any], backend: str) -> None:
    """Stop before any work when `make` cannot be sent to workers."""
    import cloudpickle

    try:
        cloudpickle.dumps(make)
    except Exception as e:  # pickling raises TypeError, PicklingError, AttributeError...
        name = getattr(make, "__qualname__", repr(make))
        raise UsageError(
            f"the function {name} cannot be sent to --backend {backend} workers ({e}). HINT: "
            "use a module-level function, or --backend threads"
        ) from None
