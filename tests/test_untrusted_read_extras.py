"""The audio and video fields' declarations (extra.audio and extra.video before format version
4) and an image pack's `extra.stats` checked when the manifest is read (issue 34 items 16 and the
stats traceback): one FormatError line at open for every reader, `prep info` and `prep verify`,
never TiBs allocated, a division by zero or a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import untrusted
from typer.testing import CliRunner

from loaders import AudioDataset, ClipDataset, ImageShardDataset, SampleDataset
from loaders.format import FormatError
from prep.cli.main import app


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sf = pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    from prep.kinds.audio.config import AudioConfig
    from prep.kinds.audio.pack import audio

    root = tmp_path_factory.mktemp("sound")
    (root / "src").mkdir()
    for k in range(2):
        sf.write(root / "src" / f"{k}.wav", np.sin(np.arange(3200) * 0.1 * (k + 1)), 16000)
    audio(AudioConfig(src=str(root / "src"), out=str(root / "ds"), jobs=1, mono=True), False)
    return root / "ds"


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("av")
    from prep.demo.video import make_video_demo
    from prep.kinds.video.config import VideoConfig
    from prep.kinds.video.pack import pack_video

    root = tmp_path_factory.mktemp("video")
    make_video_demo(root / "src", per_class=1, seed=0)
    opts: dict[str, Any] = {"fps": 4.0, "size": 16, "jobs": 1, "mode": "fill"}
    pack_video(VideoConfig(src=str(root / "src"), out=str(root / "ds"), **opts), False)
    return root / "ds"


def lie(src: Path, tmp_path: Path, where: str, key: str, value: Any, part: str = "extra") -> Path:
    """A copy of `src` whose manifest says `m[part][where][key] = value` (a key of None: the
    whole of m[part][where]): a field's declaration (part "fields"), or what `extra` holds."""
    root = shutil.copytree(src, tmp_path / "lie")

    def change(m: dict[str, Any]) -> None:
        if key is None:
            m[part][where] = value
        else:
            m[part][where][key] = value

    return untrusted.edit_manifest(root, change)


def refused_everywhere(root: Path, match: str, *readers: Any) -> None:
    """Every reader, `prep info` and `prep verify` refuse `root` with one line saying `match`."""
    for read in readers:
        with pytest.raises(FormatError, match=match):
            read(root)
    for command in ("info", "verify"):
        result = CliRunner().invoke(app, [command, str(root)])
        assert result.exit_code != 0 and "Traceback" not in result.output, result.output
        assert match.replace("\\", "") in result.output, (command, result.output)


AUDIO = [
    ("rate", 1e12, "rate 1000000000000.0 is not 1..384000 Hz"),
    ("rate", "fast", "rate 'fast' is not 1..384000 Hz"),
    ("rate", 0, "rate 0 is not"),
    ("channels", 0, "channels 0 is not 1..64"),
    ("channels", 1_000_000_000, "channels 1000000000 is not 1..64"),
    ("channels", 2, "a mono field has one channel, not 2"),
    ("dtype", "float16", r"array audio: dtype int16 is not one of \('float16',\)"),
    ("mono", False, r"array audio: shape \[\] is not audio's"),
    ("seconds", "long", r"audio field has unknown keys \['seconds'\]"),
    ("max_seconds", -1, "max_seconds -1 is not null or a duration"),
    (None, [16000], "field 'audio' has no kind of"),
]


@pytest.mark.parametrize("key, value, match", AUDIO)
def test_a_lying_audio_field_is_refused_at_open(
    sound: Path, tmp_path: Path, key: str, value: Any, match: str
) -> None:
    AudioDataset(sound, seconds=0.1).__getitems__([0, 1])  # as packed: fine
    root = lie(sound, tmp_path, "audio", key, value, "fields")
    refused_everywhere(root, match, AudioDataset, SampleDataset)


VIDEO = [
    ("fps", "fast", "could not convert string to float: 'fast'"),
    ("fps", 0, r"fps 0 must be in \(0, 1000\]"),
    ("size", 1e9, "size 1000000000.0 / mode 'fill': 1..16384"),
    ("mode", "wide", "mode 'wide': 1..16384"),
    ("codec", 7, "codec 7 / quality 90: raw, jpeg"),
    ("frames", "many", r"video field has unknown keys \['frames'\]"),
    ("max_frames", 0, "max_frames 0 is not null or a count"),
]


@pytest.mark.parametrize("key, value, match", VIDEO)
def test_a_lying_video_field_is_refused_at_open(
    video: Path, tmp_path: Path, key: str, value: Any, match: str
) -> None:
    root = lie(video, tmp_path, "frames", key, value, "fields")
    clips = lambda r: ClipDataset(r, frames=2)  # noqa: E731
    refused_everywhere(root, match, SampleDataset, clips)


STATS = [
    ([1, 2], "extra.stats.image is not a split and sizes"),
    ({"split": 3, "sizes": {}}, "extra.stats.image is not a split and sizes"),
    ({"sizes": {"48": {"mean": [1, 2, 3], "std": [1, 1, 1], "pixels": 9}}}, "at '48' is not"),
    ({"sizes": {"64": {"mean": [1, 2], "std": [1, 1], "pixels": 9}}}, "at '64' is not a mean"),
    ({"sizes": {"64": {"mean": "x", "std": [1, 1, 1], "pixels": 9}}}, "at '64' is not a mean"),
    ({"sizes": {"64": {"mean": [1, 2, 3], "std": [1, -1, 1], "pixels": 9}}}, "at '64' is not"),
    ({"sizes": {"64": {"mean": [1, 2, 3], "std": [1, 1, 1], "pixels": "9"}}}, "at '64' is not"),
    ({"sizes": {"64": [1, 2, 3]}}, "extra.stats.image at '64' is not a mean and std"),
]


@pytest.mark.parametrize("stats, match", STATS)
def test_malformed_image_stats_are_refused_at_open(
    packed: Path, tmp_path: Path, stats: Any, match: str
) -> None:
    root = lie(packed, tmp_path, "stats", "image", stats)  # the image field's statistics
    refused_everywhere(root, match, lambda r: ImageShardDataset(r, size=64))


@pytest.mark.parametrize(
    "stats, match",
    [
        (12, "extra.stats 12 is not an object"),
        ({"nope": {}}, "'nope' is not an image field"),
    ],
)
def test_statistics_of_no_image_field_are_refused_at_open(
    packed: Path, tmp_path: Path, stats: Any, match: str
) -> None:
    root = lie(packed, tmp_path, "stats", None, stats)  # type: ignore[arg-type]
    refused_everywhere(root, match, lambda r: ImageShardDataset(r, size=64))
