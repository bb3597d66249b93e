"""The options of every `prep import` source (prep.run.config has the shared ones), and Tree:
where the files a source names may be. Light to import: the CLI builds its commands from them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from loaders.format import STORAGES
from prep.run.config import RunConfig, check, choice, opt
from prep.run.errors import UsageError


@dataclass
class ImportConfig(RunConfig):
    """What every image importer takes: the image field's options, as `prep pack`'s."""

    sizes: list[int] = opt([256], "Side(s) in px, comma-separated: 256,512.", "--sizes", "--size")
    mode: str = opt(
        "fill",
        "fill: crop to square | fit: pad to square | stretch: ignore aspect | keep: longer side "
        "<= size, never enlarged (load with crop=).",
    )
    codec: str = opt("raw", "raw | jpeg (the images; every other field is raw).")
    quality: int = opt(90, "jpeg: the JPEG quality, 1-100.")
    gray: bool = opt(False, "One channel, converted at decode time.", "--gray/--rgb")
    pad_value: int = opt(0, "fit mode: the colour of the padding (0-255).")
    max_pixels: int = opt(100_000_000, "Refuse larger images before decoding.")
    format: str = opt("npy", "Shard files: npy (one per array) | h5 (one per shard).")
    shard_size: int | None = opt(None, "Samples per shard (default: from the input count).")

    USAGE: ClassVar[str] = "SRC OUT"

    def given(self) -> bool:  # all the arguments of USAGE
        return bool(self.src and self.out)

    def validate(self) -> None:
        from loaders.fields.image import MODES

        if not self.given():
            raise UsageError(
                f"no {self.USAGE.replace(' ', '/')} given. HINT: `prep import {self.SECTION} "
                f"{self.USAGE}`, or set them in the [{self.SECTION}] section of --config"
            )
        super().validate()
        check(bool(self.sizes) and min(self.sizes) >= 1, f"--sizes {self.sizes}", "1 px or more")
        choice(self.mode, MODES, "--mode")
        choice(self.codec, ("raw", "jpeg"), "--codec")
        choice(self.format, STORAGES, "--format")
        check(1 <= self.quality <= 100, f"--quality {self.quality}", "1..100")
        check(0 <= self.pad_value <= 255, f"--pad-value {self.pad_value}", "0..255")
        check(self.shard_size is None or self.shard_size >= 1, "--shard-size", "at least 1")


@dataclass
class PathsConfig(ImportConfig):
    """An importer whose source file names other files (Tree)."""

    allow_outside: bool = opt(
        False,
        "Read files the source names outside its own folder: absolute paths, .., links out "
        "(default: each is an `outside` reject).",
    )


@dataclass
class CocoConfig(PathsConfig):
    src: str | None = opt(None, "A COCO instances JSON (annotations/instances_train2017.json).")
    images: str | None = opt(None, "The folder its images' file_name are relative to.")
    skip_empty: bool = opt(False, "Leave out images without annotations (default: keep them).")
    masks: bool = opt(
        False,
        "Also a class-id mask (label + 1; 0: background) from the segmentations (polygons, RLE), "
        "placed like the image.",
    )
    keypoints: bool = opt(
        False, "Also each instance's keypoints (N, K, 3: x, y, visibility), placed like the boxes."
    )
    instances: bool = opt(
        False,
        "Also each instance's mask (N, H, W of 0 and 1), placed like the image: N x H x W bytes "
        "a sample.",
    )
    polygons: bool = opt(
        False,
        "Also each instance's segmentation polygons (x, y points), placed like the image and "
        "cut to what it shows (a Polygons field; RLE segmentations have none).",
    )

    SECTION: ClassVar[str] = "coco"
    USAGE: ClassVar[str] = "ANNOTATIONS IMAGES_DIR OUT"

    def given(self) -> bool:
        return super().given() and bool(self.images)


@dataclass
class PairsConfig(PathsConfig):
    src: str | None = opt(None, "A .csv, .jsonl or .parquet of image-caption pairs.")
    image_column: str = opt(
        "image", "The column of image paths (relative to SRC's folder) or encoded bytes."
    )
    text_column: str = opt("caption", "The column of captions.")
    tokenizer: str | None = opt(None, "A tokenizer.json: also store each caption's token ids.")
    allow_empty: bool = opt(False, "Keep pairs whose caption is empty (default: a reject).")

    SECTION: ClassVar[str] = "pairs"


@dataclass
class HFConfig(PathsConfig):
    src: str | None = opt(
        None,
        "A save_to_disk folder (dataset_dict.json or state.json and .arrow files) or a folder "
        "of .parquet files.",
    )
    splits: str | None = opt(None, "The splits to import, comma-separated (default: all).")
    columns: str | None = opt(
        None, "The columns to import, comma-separated (default: all; a dict's keys come along)."
    )

    SECTION: ClassVar[str] = "hf"


@dataclass
class WdsConfig(ImportConfig):
    src: str | None = opt(
        None,
        "Tar shards: a path or URL with braces ('shards/train-{000000..000099}.tar'), or a "
        "folder of .tar files.",
    )
    fields: str | None = opt(
        None, "The extensions to import, comma-separated: jpg,cls (default: all the tars hold)."
    )
    max_member_mb: float = opt(
        256.0,
        "A sample with a member larger than this (MB) is a reject, never read: members are "
        "read whole into memory.",
    )

    SECTION: ClassVar[str] = "webdataset"

    def validate(self) -> None:
        super().validate()
        check(self.max_member_mb > 0, f"--max-member-mb {self.max_member_mb}", "more than 0")
        if ".tar" in Path(str(self.out)).name:  # `{0..1}` expanded by the shell: 2 tars
            raise unquoted(f"OUT {self.out} is a tar")


def unquoted(what: str) -> UsageError:
    """The error of a brace pattern the shell expanded."""
    return UsageError(
        f"{what}: was a brace pattern left unquoted, so that the shell expanded it? HINT: quote "
        "it: prep import webdataset 'shards/train-{000000..000099}.tar' OUT"
    )


def image_field(cfg: ImportConfig) -> Any:
    """The import's Image field."""
    from prep.fields import Image

    return Image(
        sizes=tuple(cfg.sizes),
        mode=cfg.mode,
        codec=cfg.codec,
        gray=cfg.gray,
        quality=cfg.quality,
        pad_value=cfg.pad_value,
        max_pixels=cfg.max_pixels,
    )


@dataclass(frozen=True)
class Tree:
    """The folder a source's paths are relative to, and whether they may leave it: they stay
    inside, links resolved, or someone else's source could pack `~/.ssh/id_rsa` into a dataset
    the user publishes; --allow-outside reads them anyway (the HF hub cache, DVC, git-annex).

    >>> Tree(Path("/data/coco/images")).why("a/../../x.png")[:46]
    "'a/../../x.png' leads out of /data/coco/images"
    """

    root: Path
    allow_outside: bool = False
    _folders: dict[str, Path] = field(default_factory=dict, init=False, repr=False, compare=False)

    @cached_property
    def real(self) -> Path:
        return self.root.resolve()

    def why(self, name: str, within: Path | None = None) -> str | None:
        """Why `name` (relative to `within`, default the root) leaves the tree, with the HINT;
        None when it may be read (or cannot be resolved: the file checks reject it)."""
        if self.allow_outside:
            return None
        rel = name if within is None else os.path.join(os.path.relpath(within, self.root), name)
        if os.path.isabs(name):
            said = f"{name!r} is an absolute path"
        elif ".." in os.path.normpath(rel).split(os.sep):
            said = f"{name!r} leads out of {self.root} (..)"
        else:
            try:
                real = self._resolved(self.root / rel)
            except (OSError, RuntimeError, ValueError):  # RuntimeError: a link loop (< 3.13)
                return None
            if real == self.real or real.is_relative_to(self.real):
                return None
            said = f"{name!r} is a link to {real}, outside {self.root}"
        hint = "a source names files inside its own folder; --allow-outside reads them anyway"
        return f"{said}. HINT: {hint}"

    def _resolved(self, path: Path) -> Path:
        """`path` with its links resolved: its folder once a tree (a COCO file's images share a
        few folders), then the file when it is a link: one lstat a file, not one a component."""
        if path.name in ("", ".", ".."):
            return path.resolve()
        folder = self._folders.get(str(path.parent))
        if folder is None:
            folder = self._folders[str(path.parent)] = path.parent.resolve()
        found = folder / path.name
        return found.resolve() if found.is_symlink() else found
