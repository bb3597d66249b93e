"""Config as plain data: dataclass defaults < TOML file section < command-line overrides.

The effective config is saved in the dataset's manifest."""

from __future__ import annotations

import os
import tomllib
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from prep import PrepError

DEFAULT_CONFIG = Path("configs/default.toml")


@dataclass
class PackConfig:
    src: str | None = None
    out: str | None = None
    sizes: list[int] = field(default_factory=lambda: [256])
    mode: str = "fill"  # fill | fit | stretch
    gray: bool = False
    masks: str | None = None
    format: str = "npy"  # npy | h5
    shard_size: int = 1000
    pad_value: int = 0  # fit mode: the colour of the padding (0-255)
    mask_pad_value: int = 0  # fit mode: the class id of padded mask pixels
    max_pixels: int = 100_000_000  # larger images are refused before decoding
    max_rejects: float = 0.01  # fail when more than this fraction of inputs is rejected
    limit: int | None = None  # pack only the first N inputs
    shuffle_seed: int | None = None  # store inputs in this seeded random order, not sorted
    jobs: int = 0  # 0: all cores
    backend: str = "loky"
    scheduler: str | None = None
    overwrite: bool = False
    resume: bool = False

    # Keys that do not change the output bytes: a resumed run may differ in these.
    RUNTIME = ("jobs", "backend", "scheduler", "overwrite", "resume", "max_rejects")

    def output_config(self) -> dict[str, Any]:
        """What the output bytes depend on (saved in the manifest, compared on --resume)."""
        return {k: v for k, v in asdict(self).items() if k not in self.RUNTIME}

    def validate(self) -> None:
        from loaders.format import STORAGES
        from prep.kinds.images.decode import MODES

        if not self.src or not self.out:
            raise PrepError(
                "no SRC/OUT given. HINT: `prep pack SRC OUT` or set src/out in "
                "the [pack] section of the config"
            )
        if not self.sizes or any(s < 1 or s > 16384 for s in self.sizes):
            raise PrepError(f"sizes {self.sizes} must be 1..16384 px. HINT: --sizes 128,256")
        if self.mode not in MODES:
            raise PrepError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.format not in STORAGES:
            raise PrepError(f"format {self.format!r} is not one of {', '.join(STORAGES)}")
        if self.shard_size < 1:
            raise PrepError(f"shard size {self.shard_size} must be at least 1")
        if self.limit is not None and self.limit < 1:
            raise PrepError(f"--limit {self.limit} must be at least 1")
        if not (0 <= self.pad_value <= 255 and 0 <= self.mask_pad_value <= 255):
            raise PrepError("pad values must be 0..255")
        if not 0 <= self.max_rejects <= 1 or self.max_pixels < 1:
            raise PrepError(
                f"--max-rejects {self.max_rejects:g} must be a fraction 0..1 and --max-pixels "
                f"{self.max_pixels} at least 1. HINT: --max-rejects 0.05 allows 5% bad inputs"
            )
        self.sizes = sorted(set(self.sizes))

    @property
    def n_jobs(self) -> int:
        return self.jobs if self.jobs > 0 else (os.cpu_count() or 1)


C = TypeVar("C")


def load_config(cls: type[C], section: str, path: Path | None, overrides: dict[str, Any]) -> C:
    """`cls` defaults, then `[section]` of the TOML file, then overrides that are not None.

    With no path and no SRC on the command line the default config is read when it exists (so
    `make dataset` needs no flags, and `prep pack SRC OUT` takes nothing from the demo config)."""
    values: dict[str, Any] = {}
    if path is None and overrides.get("src") is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise PrepError(f"config {path}: {e}. HINT: check the TOML syntax") from e
        values = dict(data.get(section, {}))
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - known)
        if unknown:
            raise PrepError(
                f"config {path} [{section}]: unknown keys {unknown}. "
                f"HINT: known keys are {sorted(known)}"
            )
    values.update({k: v for k, v in overrides.items() if v is not None})
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        if not _fits(value, hints[key]):
            raise PrepError(
                f"[{section}] {key} = {value!r} is not {_type_name(hints[key])}. HINT: e.g. "
                "sizes = [128, 256], limit = 100, gray = true"
            )
    return cls(**values)


def _fits(value: Any, hint: Any) -> bool:
    """Whether a config value has its field's type: int, float, bool, str, None, list[int]."""
    if isinstance(hint, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if hint is type(None):
        return value is None
    if hint is float:  # an integer is a fine fraction or size
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


@dataclass
class TokenizeConfig:
    src: str | None = None
    out: str | None = None
    tokenizer: str = "bytes"  # bytes | char | bpe | path/to/tokenizer.json
    vocab_size: int = 8192  # bpe only
    val_fraction: float = 0.01  # share of documents in "val", chosen by a hash of their text
    split_lines: bool = False  # .txt: one document per line instead of per file
    text_field: str = "text"  # .jsonl: the field holding the text
    errors: str = "strict"  # invalid UTF-8: strict (reject) | replace (U+FFFD)
    shard_mb: float = 64.0  # text per shard (one joblib task each)
    max_doc_mb: float = 64.0  # longer documents are rejected, read in bounded chunks
    max_rejects: float = 0.01
    limit: int | None = None  # only the first N documents
    jobs: int = 0  # 0: all cores
    backend: str = "loky"
    overwrite: bool = False
    resume: bool = False

    RUNTIME = ("jobs", "backend", "overwrite", "resume", "max_rejects")

    def output_config(self) -> dict[str, Any]:
        """What the output bytes depend on (saved in the manifest, compared on --resume)."""
        return {k: v for k, v in asdict(self).items() if k not in self.RUNTIME}

    def validate(self) -> None:
        from prep.kinds.text.documents import ERRORS
        from prep.kinds.text.tokenizers import check_tokenizer

        if not self.src or not self.out:
            raise PrepError(
                "no SRC/OUT given. HINT: `prep tokenize SRC OUT` or set src/out in "
                "the [tokenize] section of the config"
            )
        check_tokenizer(self.tokenizer, self.vocab_size)
        if not 0 <= self.val_fraction < 1:
            raise PrepError(f"val fraction {self.val_fraction} must be in [0, 1). HINT: 0.01")
        if self.errors not in ERRORS:
            raise PrepError(f"errors {self.errors!r} is not one of {', '.join(ERRORS)}")
        if self.shard_mb <= 0 or self.max_doc_mb <= 0:
            raise PrepError("--shard-mb and --max-doc-mb must be positive")
        if self.limit is not None and self.limit < 1:
            raise PrepError(f"--limit {self.limit} must be at least 1")

    @property
    def n_jobs(self) -> int:
        return self.jobs if self.jobs > 0 else (os.cpu_count() or 1)
