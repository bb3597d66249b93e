"""Every dataset class reads each field as SampleDataset does, or refuses it by name (issue 34
item 4: AudioDataset's `source` came back as one byte of the paths a sample, and `audio` was
refused though it is there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from loaders import AudioDataset, ClipDataset, ImageShardDataset, MixedDataset, SampleDataset

NAMES = ["a/0.wav", "a/1.wav", "b/2.wav", "b/3.wav"]


@pytest.fixture(scope="module")
def sounds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four stereo clips of 0.1-0.25 s in two classes, packed by prep audio, with a target."""
    sf = pytest.importorskip("soundfile")
    pytest.importorskip("soxr")
    from prep.kinds.audio.config import AudioConfig
    from prep.kinds.audio.pack import audio

    root = tmp_path_factory.mktemp("sounds")
    for k, name in enumerate(NAMES):
        (root / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        tone = 0.5 * np.sin(np.arange(1600 + 800 * k) * (0.05 + 0.02 * k))
        sf.write(root / "src" / name, np.stack([tone, -tone], 1), 16000)
    (root / "t.csv").write_text("path,snr\n" + "".join(f"{n},{k}.5\n" for k, n in enumerate(NAMES)))
    cfg = AudioConfig(
        src=str(root / "src"), out=str(root / "ds"), jobs=1, targets=str(root / "t.csv")
    )
    audio(cfg, show_progress=False)
    return root / "ds"


def test_audio_source_is_each_clips_path(sounds: Path) -> None:
    got = AudioDataset(sounds, fields=("source",)).__getitems__([0, 1, 2, 3])["source"]
    assert got == SampleDataset(sounds, fields=("source",)).__getitems__([0, 1, 2, 3])["source"]
    assert sorted(got) == NAMES


def test_audio_reads_every_field_as_sample_dataset_does(sounds: Path) -> None:
    """Every declared field, audio included, one at a time and all together: the same values as
    SampleDataset's (wide unsigned ints as int64, as AudioDataset always gave them)."""
    declared = list(SampleDataset(sounds).declared)
    assert {"audio", "source", "source_rate", "start", "label", "snr"} <= set(declared)
    idx = [3, 0, 2]
    want = SampleDataset(sounds).__getitems__(idx)
    every = AudioDataset(sounds, seconds=None, fields=(*declared, "index")).__getitems__(idx)
    for f in declared:
        one = AudioDataset(sounds, seconds=None, fields=(f,)).__getitems__(idx)
        for got in (one, every):
            if isinstance(want[f], list):
                assert got[f] == want[f], f
            elif f == "audio":  # (B, C, T) here, (B, T, C) as SampleDataset pads rows
                assert torch.equal(got[f], want[f].permute(0, 2, 1)), f
                assert torch.equal(got["audio_len"], want["audio_len"])
            else:
                assert got[f].tolist() == want[f].tolist(), f
                wide = want[f].dtype in (torch.uint16, torch.uint32, torch.uint64)
                assert got[f].dtype == (torch.int64 if wide else want[f].dtype), f
    assert every["index"].tolist() == idx
    assert AudioDataset(sounds, fields=("audio",)).fields == ("audio",)


def test_a_field_no_dataset_has_is_refused_by_name(sounds: Path, packed: Path) -> None:
    with pytest.raises(ValueError, match=r"has no field \['nope'\]"):
        AudioDataset(sounds, fields=("nope",))
    with pytest.raises(ValueError, match=r"has no field \['source'\].*HINT: ds.source\(i\)"):
        ImageShardDataset(packed, size=64, fields=("image", "source"))
    assert ImageShardDataset(packed, size=64).source(0) is not None


def test_a_mixture_of_audio_datasets_keeps_the_audio(sounds: Path) -> None:
    a = AudioDataset(sounds, seconds=0.05, fields=("label", "source"))
    mixed = MixedDataset([a, a], seed=0)
    b = mixed.__getitems__([0, 1, 2])
    assert b["audio"].shape == (3, 2, 800) and b["audio_len"].tolist() == [800] * 3
    assert all(s in NAMES for s in b["source"])


def test_clips_name_their_video(tmp_path: Path) -> None:
    pytest.importorskip("av")
    from prep.demo.video import make_video_demo
    from prep.kinds.video.config import VideoConfig
    from prep.kinds.video.pack import pack_video

    make_video_demo(tmp_path / "src", per_class=1, seed=0)
    opts: dict[str, Any] = {"fps": 4.0, "size": 16, "jobs": 1, "mode": "fill"}
    pack_video(VideoConfig(src=str(tmp_path / "src"), out=str(tmp_path / "ds"), **opts), False)
    clips = ClipDataset(tmp_path / "ds", frames=2, clips_per_video=3)
    names = SampleDataset(tmp_path / "ds", fields=("source",)).__getitems__(range(4))["source"]
    assert [clips.source(i) for i in range(12)] == [n for n in names for _ in range(3)]
