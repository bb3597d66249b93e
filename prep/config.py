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

DEFAULT_CONFIG = Path("configs/default.toml")
BACKENDS = ("loky", "dask")


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
    jobs: int = opt(0, "Worker processes (0: all cores).", "--jobs", "-j")
    backend: str = opt(
        "loky", "loky: processes here | dask: a distributed cluster (the dask extra)."
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
    mode: str = opt("fill", "fill: crop to square | fit: pad to square | stretch: ignore aspect.")
    gray: bool = opt(False, "One channel, converted at decode time.", "--gray/--rgb")
    masks: str | None = opt(None, "Folder of masks with the images' relative stems.")
    format: str = opt("npy", "npy | h5")
    shard_size: int = opt(1000, "Samples per shard.")
    pad_value: int = opt(0, "fit mode: the colour of the padding (0-255).")
    mask_pad_value: int = opt(0, "fit mode: the class id of padded mask pixels (0-255).")
    max_pixels: int = opt(100_000_000, "Refuse larger images before decoding.")
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
        check(self.shard_size >= 1, f"--shard-size {self.shard_size}", "at least 1")
        for name in ("pad_value", "mask_pad_value"):
            value = getattr(self, name)
            check(0 <= value <= 255, f"--{name.replace('_', '-')} {value}", "0..255")
        check(self.max_pixels >= 1, f"--max-pixels {self.max_pixels}", "at least 1")
        self.sizes = sorted(set(self.sizes))


@dataclass
class TokenizeConfig(RunConfig):
    src: str | None = opt(None, "Folder of .txt files, one .txt file, or a .jsonl file.")
    tokenizer: str = opt(
        "bytes", "bytes (default) | char | bpe | path/to/tokenizer.json.", "--tokenizer", "-t"
    )
    vocab_size: int = opt(8192, "bpe: vocabulary size to train (default 8192).")
    val_fraction: float = opt(0.01, "Share of documents in val, chosen by a hash of their text.")
    split_lines: bool = opt(False, ".txt: one document per line, not per file.", "--split-lines")
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


@dataclass
class TableConfig(RunConfig):
    src: str | None = opt(
        None, "A .csv/.tsv/.jsonl/.parquet file, a folder of them, or a quoted glob 'data/*.csv'."
    )
    limit: int | None = opt(None, "Only the first N rows.")
    target: str | None = opt(None, "The column to predict (y); none: batches are (x_num, x_cat).")
    categorical: str | None = opt(None, "Columns to code as categories, comma-separated.")
    drop: str | None = opt(None, "Columns to leave out, comma-separated.")
    key: str | None = opt(None, "Split by a hash of this column (default: of the whole row).")
    val_fraction: float = opt(0.0, "Share of rows in val, chosen by a hash of --key or the row.")
    na_values: str | None = opt(None, "Cell texts meaning missing besides '', e.g. N/A,-.")
    float16: bool = opt(False, "Store floats as float16 where every value fits (|x| <= 65504).")
    missing_mask: bool = opt(False, "Also store a 0/1 mask per numeric column with missing values.")
    shard_rows: int = opt(262144, "Rows per shard (one task each).")

    SECTION: ClassVar[str] = "table"

    def names(self, key: str) -> list[str]:
        """A comma-separated option as a list of column names."""
        value = getattr(self, key)
        return [n.strip() for n in value.split(",") if n.strip()] if value else []

    def validate(self) -> None:
        super().validate()
        check(0 <= self.val_fraction < 1, f"--val-fraction {self.val_fraction}", "in [0, 1)")
        check(self.shard_rows >= 1, f"--shard-rows {self.shard_rows}", "at least 1")
        dropped = set(self.names("drop"))
        for key in ("target", "key"):
            value = getattr(self, key)
            check(value not in dropped, f"--{key} {value}", "a column that is not dropped")
        used = self.key is None or self.val_fraction > 0
        check(used, f"--key {self.key}", "used with --val-fraction above 0")


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


def float_list(text: str | None, n: int, what: str) -> tuple[float, ...] | None:
    """`"1.5,1.5,2"` as (1.5, 1.5, 2.0); a bad or wrong-length list is a UsageError."""
    if text is None:
        return None
    try:
        values = tuple(float(x) for x in text.replace(" ", "").split(","))
    except ValueError:
        values = ()
    check(len(values) == n, f"{what} {text!r}", f"{n} comma-separated numbers")
    return values


@dataclass
class VolumeConfig(RunConfig):
    src: str | None = opt(None, "Folder of NIfTI scans (.nii, .nii.gz), or one scan.")
    labels: str | None = opt(None, "Folder of label volumes with the scans' relative stems.")
    targets: str | None = opt(
        None, "CSV of per-volume targets: the scan's path or stem, then target columns."
    )
    orient: str = opt("RAS", "Axis codes: axis k of the stored array increases toward letter k.")
    spacing: str | None = opt(None, "Resample to this voxel size in mm, e.g. 1.5,1.5,2.")
    window: str | None = opt(None, "LO,HI: clip to the window and scale to uint8 (CT: -1000,400).")
    dtype: str = opt("int16", "Without --window: int16 | uint8 | float16 (values must fit).")
    crop_foreground: bool = opt(
        False, "Crop to the box of the non-background voxels.", "--crop-foreground"
    )
    margin: int = opt(0, "--crop-foreground: voxels kept around the box.")
    shape: str | None = opt(None, "D,H,W: centre-crop or pad every volume to this shape.")
    volume_index: int | None = opt(None, "4-D scans: the volume of the 4th axis to pack.")
    shard_size: int = opt(8, "Volumes per shard (one task each).")

    SECTION: ClassVar[str] = "volumes"

    def validate(self) -> None:
        from prep.kinds.volumes.transform import STORED, check_orient

        super().validate()
        check(check_orient(self.orient), f"--orient {self.orient}", "3 axis codes, e.g. RAS")
        spacing = float_list(self.spacing, 3, "--spacing")
        check(spacing is None or min(spacing) > 0, f"--spacing {self.spacing}", "positive mm")
        window = float_list(self.window, 2, "--window")
        check(window is None or window[0] < window[1], f"--window {self.window}", "LO < HI")
        choice(self.dtype, tuple(STORED), "--dtype")
        check(
            window is None or self.dtype in ("int16", "uint8"),
            f"--window with --dtype {self.dtype}",
            "left out: a window stores uint8",
        )
        shape = float_list(self.shape, 3, "--shape")
        check(
            shape is None or all(s >= 1 and s == int(s) for s in shape),
            f"--shape {self.shape}",
            "3 whole voxel counts",
        )
        check(self.margin >= 0, f"--margin {self.margin}", "0 or more")
        check(self.volume_index is None or self.volume_index >= 0, "--volume-index", ">= 0")
        check(self.shard_size >= 1, f"--shard-size {self.shard_size}", "at least 1")

    @property
    def stored_dtype(self) -> str:
        return "uint8" if self.window else self.dtype
