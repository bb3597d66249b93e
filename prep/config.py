"""Config as plain data: dataclass defaults < TOML file section < command-line overrides.

Each option is declared once, here: its type, default and help (`opt`); the Typer commands are
made from these dataclasses (prep.options). The effective config is saved in the manifest."""

from __future__ import annotations

import os
import tomllib
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from prep import PrepError, UsageError
from prep.run.parallel import BACKENDS

DEFAULT_CONFIG = Path("configs/default.toml")
CODECS = ("raw", "jpeg")  # --codec; mode keep stores raw samples ragged


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
    staging: str | None = opt(
        None,
        "For a remote OUT (s3://, gs://, ...): the local folder the dataset is built in before "
        "the upload (default: ~/.cache/prep/staging, or $PREP_CACHE/staging).",
    )

    SECTION: ClassVar[str] = ""
    # Keys that do not change the output bytes: a resumed run may differ in these.
    RUNTIME: ClassVar[tuple[str, ...]] = (
        "jobs",
        "backend",
        "scheduler",
        "overwrite",
        "resume",
        "max_rejects",
        "staging",
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


def choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    check(value in allowed, f"{what} {value!r}", "one of " + ", ".join(allowed))


@dataclass
class PackConfig(RunConfig):
    src: str | None = opt(
        None, "Folder of images (class sub-folders give labels) or a .csv/.jsonl list."
    )
    sizes: list[int] = opt(
        [256], "Side(s) in px, comma-separated: 128,256,512.", "--sizes", "--size", "-s"
    )
    mode: str = opt(
        "fill",
        "fill: crop to square | fit: pad to square | stretch: ignore aspect | keep: longer side "
        "<= size, never enlarged, each sample its own shape (load with crop=).",
    )
    codec: str = opt(
        "raw",
        "raw | jpeg: one for all sizes, or one per size in --sizes order (raw,raw,jpeg). "
        "Masks, labels and other fields stay raw.",
    )
    quality: int = opt(90, "jpeg: the JPEG quality, 1-100 (4:2:0 chroma below 95, else 4:4:4).")
    gray: bool = opt(False, "One channel, converted at decode time.", "--gray/--rgb")
    masks: str | None = opt(None, "Folder of masks with the images' relative stems.")
    format: str = opt("npy", "npy | h5")
    shard_size: int | None = opt(
        None,
        "Samples per shard (one task each); default: from the input count alone, 32 shards "
        "of at least 16 up to 1000 a shard, so every core works at any count.",
    )
    pad_value: int = opt(0, "fit mode: the colour of the padding (0-255).")
    mask_pad_value: int = opt(0, "fit mode: the class id of padded mask pixels (0-255).")
    max_pixels: int = opt(100_000_000, "Refuse larger images before decoding.")
    background: str = opt(
        "255,255,255",
        "R,G,B (0-255 each) that transparent pixels are composited on: white, as a browser "
        "shows a PNG; a dark one for white shapes on transparency.",
    )
    shuffle_seed: int | None = opt(
        None,
        "Store inputs in this seeded random order (mixes classes across shards for "
        "order='quasi_random'); default: sorted.",
    )

    SECTION: ClassVar[str] = "pack"

    def validate(self) -> None:
        from loaders.format import STORAGES
        from prep.kinds.images.decode import MODES

        super().validate()
        check(
            bool(self.sizes) and all(1 <= s <= 16384 for s in self.sizes),
            f"--sizes {','.join(map(str, self.sizes))}",
            "1..16384 px, e.g. --sizes 128,256",
        )
        choice(self.mode, MODES, "--mode")
        choice(self.format, STORAGES, "--format")
        check(1 <= self.quality <= 100, f"--quality {self.quality}", "1..100")
        codecs = self.codecs_by_size()
        size = self.shard_size
        check(size is None or size >= 1, f"--shard-size {size}", "at least 1 (none: auto)")
        for name in ("pad_value", "mask_pad_value"):
            value = getattr(self, name)
            check(0 <= value <= 255, f"--{name.replace('_', '-')} {value}", "0..255")
        check(self.max_pixels >= 1, f"--max-pixels {self.max_pixels}", "at least 1")
        self.background_rgb()  # checked here, once
        self.sizes = sorted(set(self.sizes))
        # Saved in size order, so that the manifest's config reads like its arrays.
        ordered = [codecs[s] for s in self.sizes]
        self.codec = ordered[0] if len(set(ordered)) == 1 else ",".join(ordered)

    def background_rgb(self) -> tuple[int, int, int]:
        """--background as (R, G, B): "0,0,0" -> (0, 0, 0)."""
        parts = self.background.replace(" ", "").split(",")
        rgb = tuple(int(p) for p in parts if p.isdigit() and len(p) <= 3)
        check(
            len(parts) == 3 and len(rgb) == 3 and all(v <= 255 for v in rgb),
            f"--background {self.background!r}",
            "three values 0-255, R,G,B (e.g. 0,0,0 for black)",
        )
        return rgb[0], rgb[1], rgb[2]

    def codecs_by_size(self) -> dict[int, str]:
        """The codec of each size: --codec's one value, or one value per --sizes entry."""
        codecs = self.codec.replace(" ", "").split(",")
        what = f"--codec {self.codec}"
        for c in codecs:
            choice(c, CODECS, "--codec")
        check(
            len(codecs) in (1, len(self.sizes)), what, f"one value or {len(self.sizes)} (--sizes)"
        )
        pairs = list(zip(self.sizes, codecs * (len(self.sizes) // len(codecs)), strict=True))
        found = dict(pairs)
        check(len(found) == len(set(pairs)), what, "one codec per size")
        return found


@dataclass
class TokenizeConfig(RunConfig):
    src: str | None = opt(None, "Folder of .txt files, one .txt file, or a .jsonl file.")
    tokenizer: str = opt(
        "bytes", "bytes (default) | char | bpe | path/to/tokenizer.json.", "--tokenizer", "-t"
    )
    vocab_size: int = opt(8192, "bpe: vocabulary size to train (default 8192).")
    val_fraction: float = opt(0.01, "Share of documents in val, chosen by a hash of their text.")
    split_lines: bool = opt(False, ".txt: one document per line, not per file.", "--split-lines")
    glob: str | None = opt(
        None,
        "Read the files whose name matches instead of *.txt, comma-separated: '*.py,*.md' "
        "(UTF-8 text of any extension; a pattern with / matches the path under SRC).",
    )
    text_field: str = opt("text", ".jsonl: the field holding the text.")
    errors: str = opt("strict", "Invalid UTF-8: strict (reject the document) | replace (U+FFFD).")
    shard_mb: float = opt(64.0, "MB of text per shard (one task each).")
    max_doc_mb: float = opt(64.0, "Reject longer documents (memory stays bounded).")

    SECTION: ClassVar[str] = "tokenize"

    def validate(self) -> None:
        from prep.kinds.text.documents import ERRORS
        from prep.kinds.text.tokenizers import check_tokenizer

        super().validate()
        check_tokenizer(self.tokenizer, self.vocab_size)
        check(0 <= self.val_fraction < 1, f"--val-fraction {self.val_fraction}", "in [0, 1)")
        choice(self.errors, ERRORS, "--errors")
        check(self.shard_mb > 0, f"--shard-mb {self.shard_mb}", "positive")
        check(self.max_doc_mb > 0, f"--max-doc-mb {self.max_doc_mb}", "positive")


C = TypeVar("C", bound=RunConfig)


def load_config(cls: type[C], section: str, path: Path | None, overrides: dict[str, Any]) -> C:
    """`cls` defaults, then `[section]` of the TOML file, then overrides that are not None.

    With no path and no SRC on the command line the default config is read when it exists (so
    `make dataset` needs no flags, and `prep pack SRC OUT` takes nothing from the demo config).
    Values are type-checked (pydantic, strict: no "1" for 1, no true for 1)."""
    from pydantic import TypeAdapter, ValidationError

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
        try:
            TypeAdapter(hints[key]).validate_python(value, strict=True)
        except ValidationError as e:
            raise UsageError(
                f"[{section}] {key} = {value!r} is not {_type_name(hints[key])} "
                f"({e.errors()[0]['msg'].lower()}). HINT: e.g. "
                "sizes = [128, 256], limit = 100, gray = true"
            ) from None
    return cls(**values)


def _type_name(hint: Any) -> str:
    """`int | None`, `list[int]`, `bool`: a type as the config file's reader would write it."""
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")
