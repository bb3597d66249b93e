"""`prep import pairs`: image-caption pairs from a .csv, .jsonl or .parquet (a row each) as
samples: the image (a path relative to the file's folder, or encoded bytes: a Parquet binary
column, or a struct with "bytes" as Hugging Face writes images), the caption as UTF-8 text, and
with --tokenizer its token ids too.

A pair whose image fails is a reject (the image's own reject code); so is an empty caption
(`empty_caption`), unless --allow-empty.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from loaders.format import Manifest
from prep.kinds.importers.config import PairsConfig, image_field
from prep.kinds.importers.paths import Tree
from prep.kinds.samples.pack import SamplesKind
from prep.run.driver import Inputs, RunSummary, run
from prep.run.errors import PrepError, Reject, UsageError
from prep.run.inputs import check_file, reject_record


def fields_of(cfg: PairsConfig) -> dict[str, Any]:
    from prep.fields import Text, Tokens

    image = image_field(cfg)
    fields: dict[str, Any] = {"image": image, "caption": Text()}
    if cfg.tokenizer:
        if not Path(cfg.tokenizer).is_file():
            raise UsageError(f"--tokenizer {cfg.tokenizer}: no such file (a tokenizer.json)")
        fields["tokens"] = Tokens(cfg.tokenizer)
    return fields


def make_pair(
    row: dict[str, Any], image_column: str, text_column: str, tokens: bool, allow_empty: bool
) -> dict[str, Any]:
    """One row -> its sample; a missing image or an empty caption raises Reject. The row's
    image path was checked by PairsKind (inside the file's folder, there)."""
    image = image_of(row.get(image_column))
    if image is None or (isinstance(image, (str, bytes)) and not image):
        raise Reject(f"no image in column {image_column!r}", code="missing_image")
    caption = row.get(text_column)
    if caption is None:
        caption = ""
    if not isinstance(caption, str):
        raise Reject(f"column {text_column!r} holds a {type(caption).__name__}", code="bad_caption")
    if not caption.strip() and not allow_empty:
        raise Reject(
            f"empty caption in column {text_column!r} (--allow-empty keeps it)",
            code="empty_caption",
        )
    sample = {"image": image, "caption": caption}
    return sample | {"tokens": caption} if tokens else sample


def image_of(value: Any) -> Any:
    """A row's image: its path or bytes, the bytes of an HF Image struct, else its path."""
    if isinstance(value, dict):  # {"bytes": b"...", "path": "..."}: an HF Image in Parquet
        return value.get("bytes") or value.get("path")
    return value


class PairsKind(SamplesKind):
    """The samples kind over a file of pairs, with its columns checked before any work."""

    def __init__(self, cfg: PairsConfig):
        make = functools.partial(
            make_pair,
            image_column=cfg.image_column,
            text_column=cfg.text_column,
            tokens=bool(cfg.tokenizer),
            allow_empty=cfg.allow_empty,
        )
        super().__init__(cfg, make, fields_of(cfg), cfg.src)  # type: ignore[arg-type]
        self.pairs = cfg

    def list_inputs(self) -> Inputs:
        inputs = super().list_inputs()
        first = self.listing.items[0].value
        odd = next((it for it in self.listing.items if not isinstance(it.value, dict)), None)
        if odd is not None:  # a JSON line that is a list or a number: no columns to read
            raise UsageError(
                f"{self.pairs.src}: {odd.rel} is a {type(odd.value).__name__}, not a row. HINT: "
                "pairs are rows of a .csv, .jsonl or .parquet (JSON lines: objects)"
            )
        for option, column in (
            ("--image-column", self.pairs.image_column),
            ("--text-column", self.pairs.text_column),
        ):
            if column not in first:
                raise UsageError(
                    f"{option} {column}: {Path(str(self.pairs.src)).name} has no such column. "
                    f"HINT: its columns are {', '.join(map(str, first))}"
                )
        stats = self._check_images()
        # The image files too (as prep pack's listing has them): a changed image is not
        # resumed as the same.
        said = [inputs.fingerprint, stats]
        inputs.fingerprint = hashlib.sha256(json.dumps(said).encode()).hexdigest()
        inputs.count, inputs.rejects = len(self.listing.items), self.listing.rejects
        return inputs

    def _check_images(self) -> list[tuple[int, int] | None]:
        """Each image path's (size, time); a row whose image file is missing (or no file), or
        outside the file's folder, is a reject now, its message naming the path, where it was
        looked for, and the fix."""
        base = self.listing.base or Path()
        tree = Tree(base, self.pairs.allow_outside)
        kept, stats = [], []
        for it in self.listing.items:
            path = image_of(it.value.get(self.pairs.image_column))
            if not isinstance(path, str) or not path:  # bytes, or no image: make_pair says
                kept.append(it)
                continue
            why = tree.why(path)
            if why is not None:
                self.listing.rejects.append(reject_record(it.rel, "outside", f"image {why}"))
                continue
            bad = check_file(base / path, it.rel)
            if bad is None:
                kept.append(it)
                stats.append(_stat(base / path))
                continue
            hint = (
                f". HINT: a relative path in --image-column {self.pairs.image_column} is "
                f"relative to the folder of {Path(str(self.pairs.src)).name}"
            )
            said = bad["message"]
            bad["message"] = f"image {path} ({base / path}): {said}{'' if 'HINT' in said else hint}"
            self.listing.rejects.append(bad)
        self.listing.items = kept
        if not kept:
            first = self.listing.rejects[-1]["message"]
            raise PrepError(f"no pairs to import in {self.pairs.src}: no image is there ({first})")
        return stats

    def manifest(self, records: list[dict[str, Any]]) -> Manifest:
        out = super().manifest(records)
        out.extra["pairs"] = {
            "source": Path(str(self.pairs.src)).name,
            "image_column": self.pairs.image_column,
            "text_column": self.pairs.text_column,
        }
        return out


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except (OSError, ValueError):  # a missing image: its reject comes when it is decoded
        return None
    return st.st_size, st.st_mtime_ns


def import_pairs(cfg: PairsConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    return run(PairsKind(cfg), show_progress, profile)
