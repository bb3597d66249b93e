"""`prep import pairs`: image-caption pairs from a .csv, .jsonl or .parquet (a row each) as
samples: the image (a path relative to the file's folder, or encoded bytes), the caption, with
--tokenizer its token ids, and the source (the image's path, else the row).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from prep.fields import Text, Tokens
from prep.kinds.importers.config import PairsConfig, Tree, image_field
from prep.run.driver import run
from prep.run.errors import PrepError, Reject, UsageError
from prep.run.grow import adopt_early
from prep.run.inputs import check_file, reject_record
from prep.run.kind import Inputs, fingerprint
from prep.run.samples import Item, SamplesRun, UserFunction
from prep.run.summary import RunSummary
from prep.sources.samples import list_inputs


def make_pair(
    row: dict[str, Any], image_column: str, text_column: str, tokens: bool, allow_empty: bool
) -> dict[str, Any]:
    """One row -> its sample; Reject for a missing image or (unless `allow_empty`) caption."""
    image = image_of(row.get(image_column))
    if image is None or (isinstance(image, (str, bytes)) and not image):
        raise Reject(f"no image in column {image_column!r}", code="missing_image")
    caption = row.get(text_column)
    caption = "" if caption is None else caption
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


class PairsKind(SamplesRun):
    """The samples run over a file of pairs, its columns checked before any work."""

    name = "import pairs"
    sourced = True
    cfg: PairsConfig

    appendable = True

    def __init__(self, cfg: PairsConfig):
        adopt_early(cfg)  # the fields below follow the options
        super().__init__(cfg)
        make = functools.partial(
            make_pair,
            image_column=cfg.image_column,
            text_column=cfg.text_column,
            tokens=bool(cfg.tokenizer),
            allow_empty=cfg.allow_empty,
        )
        self.make = UserFunction(make)
        fields: dict[str, Any] = {"image": image_field(cfg), "caption": Text()}
        if cfg.tokenizer:
            if not Path(cfg.tokenizer).is_file():
                raise UsageError(f"--tokenizer {cfg.tokenizer}: no such file (a tokenizer.json)")
            fields["tokens"] = Tokens(cfg.tokenizer)
        self.declare(fields)

    def list_inputs(self) -> Inputs:
        cfg = self.cfg
        listing = list_inputs(cfg.src, cfg.limit)
        if not listing.items:
            raise PrepError(f"no inputs in {cfg.src} ({len(listing.rejects)} rejected)")
        odd = next((it for it in listing.items if not isinstance(it.value, dict)), None)
        if odd is not None:  # a JSON line that is a list or a number: no columns to read
            raise UsageError(
                f"{cfg.src}: {odd.rel} is a {type(odd.value).__name__}, not a row. HINT: "
                "pairs are rows of a .csv, .jsonl or .parquet (JSON lines: objects)"
            )
        first = listing.items[0].value
        named = {"--image-column": cfg.image_column, "--text-column": cfg.text_column}
        for option, column in named.items():
            if column not in first:
                raise UsageError(
                    f"{option} {column}: {Path(str(cfg.src)).name} has no such column. "
                    f"HINT: its columns are {', '.join(map(str, first))}"
                )
        self.base = listing.base
        self.items, stats = self._check_images(listing.items, listing.rejects)
        # The image files too: a changed image is not resumed as the same.
        said = [listing.fingerprint, self.described(), stats]
        return Inputs(len(self.items), listing.rejects, fingerprint(said))

    def _check_images(
        self, items: list[Item], rejects: list[dict[str, Any]]
    ) -> tuple[list[Item], list[tuple[int, int] | None]]:
        """The rows whose image is there (its path their source), and each image's (size, time);
        a missing or outside image is a reject now, in `rejects`."""
        base = self.base or Path()
        tree = Tree(base, self.cfg.allow_outside)
        kept: list[Item] = []
        stats: list[tuple[int, int] | None] = []
        for it in items:
            path = image_of(it.value.get(self.cfg.image_column))
            if not isinstance(path, str) or not path:  # bytes, or no image: make_pair says
                kept.append(it)
                continue
            why = tree.why(path)
            if why is not None:
                rejects.append(reject_record(it.rel, "outside", f"image {why}"))
                continue
            bad = check_file(base / path, it.rel)
            if bad is None:
                kept.append(dataclasses.replace(it, source=path))
                try:
                    st = (base / path).stat()
                    stats.append((st.st_size, st.st_mtime_ns))
                except (OSError, ValueError):  # a missing image: its reject comes when decoded
                    stats.append(None)
                continue
            hint = (
                f". HINT: a relative path in --image-column {self.cfg.image_column} is "
                f"relative to the folder of {Path(str(self.cfg.src)).name}"
            )
            said = bad["message"]
            bad["message"] = f"image {path} ({base / path}): {said}{'' if 'HINT' in said else hint}"
            rejects.append(bad)
        if not kept:
            first = rejects[-1]["message"]
            raise PrepError(f"no pairs to import in {self.cfg.src}: no image is there ({first})")
        return kept, stats

    def extra(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        pairs = {
            "source": Path(str(self.cfg.src)).name,
            "image_column": self.cfg.image_column,
            "text_column": self.cfg.text_column,
        }
        return super().extra(records) | {"pairs": pairs}


def import_pairs(cfg: PairsConfig, show_progress: bool = True, profile: bool = False) -> RunSummary:
    return run(PairsKind(cfg), show_progress, profile)
