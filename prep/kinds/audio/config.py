"""`prep audio` options (prep.run.config has the options every command shares)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from loaders.format import STORAGES
from prep.run.config import RunConfig, check, choice, opt

DTYPES = ("int16", "float16")


@dataclass
class AudioConfig(RunConfig):
    src: str | None = opt(
        None, "Folder of sound files (class sub-folders give labels) or a .csv/.jsonl list."
    )
    labels: str | None = opt(
        None, "CSV/JSONL list of `path` (under SRC) and `label`: the files to pack and their class."
    )
    targets: str | None = opt(
        None, "CSV of per-clip targets: the file's path under SRC (or its stem), then columns."
    )
    rate: int = opt(16000, "Sample rate to store, in Hz (soxr's high-quality resampler).")
    mono: bool = opt(False, "Down-mix every file to one channel.", "--mono")
    channels: int = opt(2, "Without --mono: channels stored (a mono file is repeated to fill).")
    dtype: str = opt("int16", "Stored samples: int16 (full scale clips) | float16.")
    max_seconds: float | None = opt(None, "Cut longer files into clips of at most S seconds.")
    max_file_seconds: float = opt(
        7200.0,  # prep.media.audio.MAX_FILE_SECONDS
        "Refuse (too_long) a file longer than S seconds, or with more samples than S seconds of "
        "48 kHz stereo: by its header before decoding, else as it decodes.",
    )
    shard_size: int | None = opt(None, "Clips' files per shard (default: from the file count).")
    format: str = opt("npy", "Shard files: npy (one per array) | h5 (one per shard).")

    SECTION: ClassVar[str] = "audio"

    def validate(self) -> None:
        super().validate()
        check(1000 <= self.rate <= 384000, f"--rate {self.rate}", "1000..384000 Hz")
        check(1 <= self.channels <= 64, f"--channels {self.channels}", "1..64")
        choice(self.dtype, DTYPES, "--dtype")
        check(
            self.max_seconds is None or self.max_seconds * self.rate >= 1,
            f"--max-seconds {self.max_seconds}",
            "long enough for one sample at --rate",
        )
        check(self.max_file_seconds > 0, f"--max-file-seconds {self.max_file_seconds}", "positive")
        check(self.shard_size is None or self.shard_size >= 1, "--shard-size", "at least 1")
        choice(self.format, STORAGES, "--format")
        check(
            not (self.labels and self.src and self.src.endswith((".csv", ".jsonl"))),
            "--labels",
            "left out when SRC is a list (the list has the labels)",
        )

    @property
    def stored_channels(self) -> int:
        return 1 if self.mono else self.channels

    @property
    def segment(self) -> int | None:
        """The most samples (at --rate) a clip holds, or None: whole files.

        >>> AudioConfig(rate=16000, max_seconds=2.5).segment
        40000
        """
        return None if self.max_seconds is None else max(1, round(self.max_seconds * self.rate))
