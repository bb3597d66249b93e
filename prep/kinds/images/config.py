"""`prep pack` (resize, grayscale) options (prep.run.config has the options every command
shares)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prep.run.config import RunConfig, check, choice, listed, opt
from prep.run.errors import UsageError

CODECS = ("raw", "jpeg")  # --codec; mode keep stores raw samples ragged


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
    splits: str | None = opt(
        None,
        "Pack these sub-folders of SRC as splits of one dataset: train,val (each holds class "
        "folders; the first is the training split, whose classes every other split shares).",
    )
    val_fraction: float = opt(
        0.0, "Share of images in val, chosen by a hash of their path relative to SRC."
    )

    hashes: bool = opt(
        True,
        "Store each image's 64-bit perceptual hash and its pixels' sha256 (prep dupes, report).",
        "--hashes/--no-hashes",
    )
    drop_dupes: bool = opt(
        False,
        "Keep the first of each group of near-duplicates (input order); the others become "
        "duplicate rejects naming it. A hashing pass (1/8-scale decode) runs first.",
        "--drop-dupes/--keep-dupes",
    )
    max_distance: int = opt(
        4,  # prep.inspect.dupes.DEFAULT_DISTANCE (tests/test_dupes.py holds them equal)
        "--drop-dupes: the most bits of 64 two perceptual hashes may differ in (0-32).",
    )
    decode: str = opt(
        "cpu",
        "cpu | cuda: JPEG inputs decoded by nvJPEG on the GPU (torchvision), whole (no DCT "
        "scaling); the manifest records how far its pixels are from the CPU's.",
    )
    quality_scores: bool = opt(
        True,
        "Score each image's blur, darkness, brightness, information and colour (the quality "
        "field; prep issues lists what is flagged; docs/quality.md).",
        "--quality-scores/--no-quality",
    )
    drop_issues: str | None = opt(
        None,
        "Reject the images flagged with these issues, comma-separated: blur,dark,bright,"
        "low_info,grayscale (reason quality_ISSUE; not counted by --max-rejects).",
    )

    SECTION: ClassVar[str] = "pack"

    def validate(self) -> None:
        from loaders.format import STORAGES
        from prep.media.image.geometry import MODES

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
        check(0 <= self.max_distance <= 32, f"--max-distance {self.max_distance}", "0..32")
        self.background_rgb()  # checked here, once
        choice(self.decode, ("cpu", "cuda"), "--decode")
        if self.decode == "cuda":
            check_cuda()
        check(0 <= self.val_fraction < 1, f"--val-fraction {self.val_fraction}", "in [0, 1)")
        if self.splits is not None:
            names = listed(self.splits, "--splits", str)
            plain = all(n not in (".", "..") and not set(n) & set("/\\") for n in names)
            ok = len(set(names)) == len(names) and plain
            check(ok, f"--splits {self.splits}", "distinct sub-folder names: train,val")
            what = f"--val-fraction {self.val_fraction} with --splits"
            check(self.val_fraction == 0, what, "left out: --splits names the split folders")
        if self.drop_issues is not None:
            from prep.media.image.quality import stored_issues

            have = stored_issues(self.gray)
            ok = self.quality_scores and all(n in have for n in self.drop_list())
            check(
                ok, f"--drop-issues {self.drop_issues}", f"some of {','.join(have)}, with scores on"
            )
        self.sizes = sorted(set(self.sizes))
        # Saved in size order, so that the manifest's config reads like its arrays.
        ordered = [codecs[s] for s in self.sizes]
        self.codec = ordered[0] if len(set(ordered)) == 1 else ",".join(ordered)

    def background_rgb(self) -> tuple[int, int, int]:
        """--background as (R, G, B): "0,0,0" -> (0, 0, 0)."""
        rgb = listed(self.background, "--background", int, 3)
        check(
            all(0 <= v <= 255 for v in rgb),
            f"--background {self.background!r}",
            "three values 0-255, R,G,B (e.g. 0,0,0 for black)",
        )
        return rgb[0], rgb[1], rgb[2]

    def split_names(self) -> list[str] | None:
        """--splits as names ("train,val" -> ["train", "val"]); None: one dataset, no splits."""
        if self.splits is None:
            return ["train", "val"] if self.val_fraction > 0 else None
        return listed(self.splits, "--splits", str)

    def drop_list(self) -> list[str]:
        """--drop-issues as names ("blur,dark" -> ["blur", "dark"]); none: []."""
        return [] if self.drop_issues is None else listed(self.drop_issues, "--drop-issues", str)

    def codecs_by_size(self) -> dict[int, str]:
        """The codec of each size: --codec's one value, or one value per --sizes entry."""
        codecs = listed(self.codec, "--codec", str)
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


def check_cuda() -> None:
    """--decode cuda needs torch to see a GPU and torchvision (nvJPEG): else one line."""
    import importlib.util

    import torch  # here: prep's start-up stays without torch

    if not torch.cuda.is_available():
        raise UsageError("--decode cuda: torch sees no CUDA device here. HINT: --decode cpu")
    if importlib.util.find_spec("torchvision") is None:
        raise UsageError("--decode cuda needs torchvision. HINT: pip install '.[gpu]'")
