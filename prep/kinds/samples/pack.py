"""pack_samples and `prep samples`: samples of any shape, made by the user's function from each
input, on the samples run (prep.run.samples)."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaders.fields import Field
from prep.kinds.samples.config import SamplesConfig
from prep.run.driver import run
from prep.run.errors import PrepError, UsageError
from prep.run.kind import Inputs
from prep.run.samples import SamplesRun, UserFunction, check_shippable
from prep.run.summary import RunSummary
from prep.sources.samples import list_inputs


class SamplesKind(SamplesRun):
    """The user's samples: one function call a sample, then each field's encoder."""

    name = "samples"
    appendable = True  # identities() and grow() of SamplesRun: the user's fields do not grow
    cfg: SamplesConfig
    make: UserFunction

    def __init__(self, cfg: SamplesConfig, make: Callable[[Any], Any], fields: Any, inputs: Any):
        super().__init__(cfg)
        self.inputs, self.make = inputs, UserFunction(make)
        self.declare(fields)

    def sources(self) -> list[Path]:
        return [Path(self.inputs)] if isinstance(self.inputs, (str, Path)) else []

    def list_inputs(self) -> Inputs:
        listing, make = list_inputs(self.inputs, self.cfg.limit), self.make.fn
        if not listing.items:
            raise PrepError(f"no inputs in {self.cfg.src} ({len(listing.rejects)} rejected)")
        if self.cfg.backend != "threads":
            check_shippable(make, self.cfg.backend)
        self.items, self.base = listing.items, listing.base
        try:  # the function's name and, where known, its source
            source = inspect.getsource(make)
        except (OSError, TypeError):
            source = ""
        named = f"{getattr(make, '__module__', '')}.{getattr(make, '__qualname__', '')}:{source}"
        said = [listing.fingerprint, named, self.described()]
        digest = hashlib.sha256(repr(said).encode()).hexdigest()
        return Inputs(len(listing.items), listing.rejects, digest)


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
    or what `prep samples` takes as SRC; `options`: its options (jobs, backend, shard_size...).

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
    """`prep samples SRC OUT --recipe FILE`: FILE's FIELDS and make(), its module pickled by
    value (workers cannot import it)."""
    if not cfg.recipe:
        raise UsageError("prep samples needs --recipe FILE (a .py defining FIELDS and make)")
    path = Path(cfg.recipe)
    if not path.is_file() or path.suffix != ".py":
        raise UsageError(f"--recipe {path}: not a .py file. HINT: a file defining FIELDS and make")
    name = f"prep_recipe_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's code
        raise PrepError(f"{path}: running it raised {type(e).__name__}: {e}") from e
    make, fields = getattr(module, "make", None), getattr(module, "FIELDS", None)
    if not callable(make) or not isinstance(fields, dict):
        raise UsageError(f"{path} must define FIELDS (a dict name -> field) and make(input)")
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return run(SamplesKind(cfg, make, fields, cfg.src), show_progress, profile)
