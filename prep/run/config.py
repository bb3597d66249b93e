"""Config as plain data: dataclass defaults < TOML file section < command-line overrides; each
option declared once (`opt`), the effective config saved in the manifest."""

from __future__ import annotations

import importlib.util
import os
import types
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from prep.run.errors import PrepError, UsageError
from prep.run.parallel import BACKENDS

COMPRESS = ("none", "zstd")

DEFAULT_CONFIG = Path("configs/default.toml")
T = TypeVar("T")


def opt(default: Any, help: str, *flags: str) -> Any:
    """A config field with its command-line help and flags (default: --field-name)."""
    meta = {"help": help, "flags": flags}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class RunConfig:
    """What every writing command takes: where from and to, how many rejects, how to run."""

    src: str | None = opt(None, "Input folder or list.")
    out: str | None = opt(None, "Output dataset folder.")
    max_rejects: float = opt(0.01, "Fail when more than this fraction of inputs is rejected.")
    limit: int | None = opt(None, "Only the first N inputs.")
    jobs: int = opt(0, "Workers: threads or processes (0: all cores).", "--jobs", "-j")
    backend: str = opt(
        "auto",
        "auto: threads for images and tables (their work releases the GIL), else loky | threads | "
        "loky: processes here | dask: a distributed cluster (the dask extra).",
    )
    scheduler: str | None = opt(
        None,
        "dask scheduler tcp://HOST:PORT (workers see SRC and OUT at the same paths); none: a "
        "LocalCluster of --jobs processes here.",
    )
    overwrite: bool = opt(False, "Replace an OUT that prep wrote (kept readable until done).")
    resume: bool = opt(False, "Finish an interrupted run, reusing its verified shards.")
    append: bool = opt(
        False,
        "Add the inputs OUT does not hold yet to the dataset at OUT, as new shards (options left "
        "out take the dataset's).",
    )
    staging: str | None = opt(
        None,
        "For a remote OUT (s3://, gs://, ...): the local folder the dataset is built in before "
        "the upload (default: ~/.cache/prep/staging, or $PREP_CACHE/staging).",
    )

    compress: str = opt(
        "none",
        "none | zstd: masks, tokens, text and raw pixels in zstd chunks (random access kept; "
        'docs/format.md, "Compressed arrays").',
    )
    compress_level: int | None = opt(
        None,
        "The zstd level of --compress zstd, 1 (fast) to 19 (small); default 3, and 13 for masks "
        "(their runs decode 1.8x faster at 13, for little time: masks compress fast).",
    )

    SECTION: ClassVar[str] = ""
    # Keys that do not change the output bytes: a resumed run may differ in these.
    RUNTIME = (
        "jobs",
        "backend",
        "scheduler",
        "overwrite",
        "resume",
        "max_rejects",
        "staging",
        "append",
    )

    def output_config(self) -> dict[str, Any]:
        """What the output bytes depend on (saved in the manifest, compared on --resume)."""
        return {k: v for k, v in asdict(self).items() if k not in self.RUNTIME}

    def validate(self) -> None:
        """Check values the type alone does not: a bad one is a UsageError (exit 2)."""
        if not self.src or not self.out:
            raise UsageError(
                f"no SRC/OUT given. HINT: `prep {self.SECTION} SRC OUT` or set src/out in "
                f"the [{self.SECTION}] section of the config"
            )
        if len(os.fsencode(Path(self.out).name + ".partial")) > 255:
            raise UsageError(
                f"OUT name {Path(self.out).name[:40]}... is longer than a file name may be "
                "(255 bytes, with prep's .partial suffix). HINT: choose a shorter OUT"
            )
        check(0 <= self.max_rejects <= 1, f"--max-rejects {self.max_rejects:g}", "a fraction 0..1")
        check(self.limit is None or self.limit >= 1, f"--limit {self.limit}", "at least 1")
        check(self.jobs >= 0, f"--jobs {self.jobs}", "0 (all cores) or more")
        check(self.backend in BACKENDS, f"--backend {self.backend}", " | ".join(BACKENDS))
        choice(self.compress, COMPRESS, "--compress")
        level = self.compress_level
        check(level is None or 1 <= level <= 19, f"--compress-level {level}", "1..19")
        if self.compress != "none" and getattr(self, "format", "npy") != "npy":
            raise UsageError("--compress zstd is for npy shards. HINT: drop --format h5")
        if self.compress == "zstd" and importlib.util.find_spec("zstandard") is None:
            raise UsageError("--compress zstd needs zstandard. HINT: pip install 'prep[zstd]'")
        if self.scheduler and self.backend != "dask":
            raise UsageError(
                f"--scheduler {self.scheduler} needs the dask backend. HINT: add --backend dask"
            )

    @property
    def n_jobs(self) -> int:
        return self.jobs if self.jobs > 0 else (os.cpu_count() or 1)


def check(ok: bool, what: str, should: str) -> None:
    if not ok:
        raise UsageError(f"{what} must be {should}")


def listed(text: str, what: str, convert: Callable[[str], T], n: int | None = None) -> list[T]:
    """A comma-separated option as `convert`ed values (`n` of them), else a UsageError.

    >>> listed("128, 256", "--sizes", int), listed("a,,b", "--drop", str)
    ([128, 256], ['a', 'b'])
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = [convert(p) for p in parts]
    except ValueError:
        values = []
    kind = getattr(convert, "__name__", "value")
    should = f"{n} comma-separated {kind} values" if n else f"comma-separated {kind} values"
    check(bool(values) and (n is None or len(values) == n), f"{what} {text!r}", should)
    return values


def choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    check(value in allowed, f"{what} {value!r}", "one of " + ", ".join(allowed))


C = TypeVar("C", bound=RunConfig)


def _typed(value: Any, hint: Any) -> bool:
    """`value` plainly passes the strict check of `hint` (str, int, float, bool, a list of one,
    `| None`): such values skip pydantic, whose import is 70 ms of a small run (issue 40)."""
    union = typing.get_origin(hint) in (types.UnionType, typing.Union)
    for h in typing.get_args(hint) if union else (hint,):
        if typing.get_origin(h) is list:
            kind = typing.get_args(h)[0]
            if type(value) is list and all(type(v) is kind for v in value):
                return True
        elif h in (str, int, float, bool) and type(value) is h:
            return True
    return False


def load_config(cls: type[C], section: str, path: Path | None, overrides: dict[str, Any]) -> C:
    """`cls` defaults, then `[section]` of the TOML file (with no SRC: the default one, where it
    exists), then overrides that are not None; values type-checked strictly (pydantic)."""
    values: dict[str, Any] = {}
    if path is None and overrides.get("src") is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    if path is not None:
        import tomllib  # only where a config file is read

        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise PrepError(f"config {path}: {e}. HINT: check the TOML syntax") from e
        values = dict(data.get(section, {}))
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(
                f"config {path} [{section}]: unknown keys {unknown}. "
                f"HINT: known keys are {sorted(known)}"
            )
    values.update({k: v for k, v in overrides.items() if v is not None})
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        if _typed(value, hints[key]):
            continue
        from pydantic import TypeAdapter, ValidationError

        try:
            TypeAdapter(hints[key]).validate_python(value, strict=True)
        except ValidationError as e:  # the type as the config file's reader would write it
            type_name = str(hints[key]).replace("typing.", "").replace("<class '", "")
            type_name = type_name.replace("'>", "")
            raise UsageError(
                f"[{section}] {key} = {value!r} is not {type_name} "
                f"({e.errors()[0]['msg'].lower()}). HINT: e.g. "
                "sizes = [128, 256], limit = 100, gray = true"
            ) from None
    return cls(**values)
