"""Sizes a manifest claims for compressed samples, checked before a reader allocates for them
(issue 34 items 3 and 15): JPEG images that claim 16000 px for 32 px files, video frames that
claim 65535 px or 16000 px. One FormatError line naming the file and sample, never a 6 GB
allocation (the reads run under a 3 GB data limit, where the old allocation failed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import untrusted
from typer.testing import CliRunner

import prep
from loaders import ClipDataset, SampleDataset
from loaders.format import FormatError
from prep.cli.main import app
from prep.fields import Image

READ = """
import resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, 3 << 30))  # a claimed batch: 6 GB and more
import loaders
from loaders.format import FormatError
kind, root = sys.argv[1:]
make = {"images": loaders.ImageShardDataset, "samples": loaders.SampleDataset}
ds = make[kind](root) if kind in make else loaders.ClipDataset(root, frames=8)
try:
    ds.__getitems__(list(range(min(8, len(ds)))))
    print("read")
except FormatError as e:
    print("FormatError:", e)
"""


def read_capped(kind: str, root: Path) -> str:
    """A batch of `root` read in a process that may not allocate 3 GB: what it printed."""
    done = subprocess.run(
        [sys.executable, "-c", READ, kind, str(root)], capture_output=True, text=True, timeout=300
    )
    return done.stdout + done.stderr


def claim(root: Path, old: int, new: int) -> Path:
    """The manifest says the arrays stored at `old` px are `new` px (their names, sizes and
    shapes, the fields' and the stats' sizes); the files stay as they are."""

    def rename(name: str) -> str:
        return name.replace(f"_{old}", f"_{new}")

    def change(m: dict[str, Any]) -> None:
        for a in m["arrays"].values():
            if a["size"] == old:
                a["size"], a["shape"] = new, [new if v == old else v for v in a["shape"]]
        m["arrays"] = {rename(n): a for n, a in m["arrays"].items()}
        for shard in m["shards"]:
            shard["arrays"] = {rename(n): r for n, r in shard["arrays"].items()}
        extra = m.get("extra", {})
        for f in m["fields"].values():
            if f.get("size") == old:
                f["size"] = new
            if "sizes" in f:
                f["sizes"] = [new if s == old else s for s in f["sizes"]]
        stats = extra.get("stats", {})  # an image pack's, or per image field (samples)
        for s in [stats] if "sizes" in stats else stats.values():
            s["sizes"] = {str(new) if k == str(old) else k: v for k, v in s["sizes"].items()}

    return untrusted.edit_manifest(root, change)


def test_jpeg_images_that_claim_16000_px_are_a_format_error(
    raw_demo: Path, pack_to: Any, tmp_path: Path
) -> None:
    root = tmp_path / "ds"
    pack_to(raw_demo / "images", root, sizes=[32], codec="jpeg", shard_size=8)
    claim(root, 32, 16000)
    out = read_capped("images", root)
    assert "FormatError:" in out and "Traceback" not in out, out
    assert "the JPEG sample is 32x32 px, the manifest says 16000x16000" in out
    assert "image_32-00000.npy (shard 0, sample 0)" in out and str(root) in out


def test_jpeg_sample_images_that_claim_16000_px_are_a_format_error(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = [(rng.random((40, 30, 3)) * 255).astype(np.uint8) for _ in range(8)]
    fields = {"img": Image(sizes=(32,), codec="jpeg")}
    prep.pack_samples(lambda i: {"img": images[i]}, range(8), tmp_path / "ds", fields, jobs=1)
    claim(tmp_path / "ds", 32, 16000)
    out = read_capped("samples", tmp_path / "ds")
    assert "FormatError:" in out and "the manifest says 16000x16000" in out, out


@pytest.fixture
def clips(tmp_path: Path) -> Path:
    """Four demo clips at 4 fps as 24 px JPEG frames (mode fill: every frame 24 x 24)."""
    pytest.importorskip("av")
    from prep.demo.video import make_video_demo
    from prep.kinds.video.config import VideoConfig
    from prep.kinds.video.pack import pack_video

    make_video_demo(tmp_path / "src", per_class=1, seed=0)
    opts: dict[str, Any] = {"fps": 4.0, "size": 24, "jobs": 1, "codec": "jpeg", "mode": "fill"}
    pack_video(VideoConfig(src=str(tmp_path / "src"), out=str(tmp_path / "ds"), **opts), False)
    return tmp_path / "ds"


def test_video_frames_of_65535_px_are_refused_at_open_and_by_verify(clips: Path) -> None:
    hw = np.load(clips / "frames_hw_24-00000.npy")
    hw[1] = 65535
    untrusted.rewrite(clips, "frames_hw_24-00000.npy", hw)
    with pytest.raises(FormatError, match="a frame size of frames is not one mode fill stores"):
        SampleDataset(clips)
    with pytest.raises(
        FormatError, match=r"shard 0: .*frames_24-00000\.npy: a frame size of frames"
    ):
        ClipDataset(clips, frames=4)
    result = CliRunner().invoke(app, ["verify", str(clips)])
    assert result.exit_code == 1 and "a frame size of frames" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("mode, sides", [("short", [24, 0]), ("keep", [25, 10]), ("fit", [24, 23])])
def test_frame_sizes_a_mode_never_stores_are_refused(clips: Path, mode: str, sides: Any) -> None:
    """Each mode's own bound: short keeps the shorter side at the size, keep at most it."""
    untrusted.edit_manifest(clips, lambda m: m["fields"]["frames"].update(mode=mode))
    SampleDataset(clips)  # 24 x 24 fits every mode
    untrusted.rewrite(clips, "frames_hw_24-00000.npy", np.array([sides] * 4, np.uint16))
    with pytest.raises(FormatError, match=f"not one mode {mode} stores at 24 px"):
        SampleDataset(clips)


def test_video_frames_that_claim_16000_px_are_a_format_error(clips: Path) -> None:
    claim(clips, 24, 16000)
    hw = np.load(clips / "frames_hw_24-00000.npy")
    untrusted.rewrite(clips, "frames_hw_24-00000.npy", np.full_like(hw, 16000))
    for kind in ("samples", "clips"):
        out = read_capped(kind, clips)
        assert "FormatError:" in out and "Traceback" not in out, out
        assert "the JPEG sample is 24x24 px, the manifest says 16000x16000" in out


def test_a_video_frame_that_is_no_jpeg_is_a_format_error(clips: Path) -> None:
    """Bytes a decoder refuses inside a frame (its size and checksums made to agree): one
    FormatError naming the video and the frame, not simplejpeg's ValueError."""
    data = np.load(clips / "frames_24-00000.npy")
    ends = np.load(clips / "frames_ends_24-00000.npy")
    data[int(ends[0]) : int(ends[1])] = 0  # frame 1 of video 0: zeros
    untrusted.rewrite(clips, "frames_24-00000.npy", data)
    ds = SampleDataset(clips, ("frames",))
    with pytest.raises(FormatError, match=r"frames_24-00000.npy \(shard 0, sample 0.*frame 1: "):
        ds.__getitems__([0])
    assert len(ds.__getitems__([1])["frames"][0]) > 1
