"""`prep volumes` options (prep.run.config has the options every command shares)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prep.run.config import RunConfig, check, choice, listed, opt


def float_list(text: str | None, n: int, what: str) -> tuple[float, ...] | None:
    """`"1.5,1.5,2"` as (1.5, 1.5, 2.0); a bad or wrong-length list is a UsageError."""
    return None if text is None else tuple(listed(text, what, float, n))


@dataclass
class VolumeConfig(RunConfig):
    src: str | None = opt(
        None, "Folder of NIfTI scans (.nii, .nii.gz) or DICOM series folders, or one scan."
    )
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
        from prep.media.volume.transform import STORED, check_orient

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
