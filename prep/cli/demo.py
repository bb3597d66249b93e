"""`prep demo`: deterministic raw demo data (images, masks, text, import sources; CT phantoms,
clips, sounds on request); the writers are in prep.demo, imported when the command runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from prep.cli.options import JobsOpt, QuietOpt
from prep.run.errors import PrepError, UsageError


def _folder(path: Path) -> Path:
    """`path`, where it is a folder or nothing yet."""
    if path.exists() and not path.is_dir():
        raise PrepError(f"{path} is a file, not a folder. HINT: name a new folder for the demo")
    return path


def demo(
    raw: Annotated[
        Optional[Path], typer.Argument(help="Folder to write the raw demo data into.")
    ] = None,
    count: Annotated[int, typer.Option(help="Number of images.")] = 64,
    seed: Annotated[int, typer.Option(help="Same seed, same bytes.")] = 0,
    max_side: Annotated[int, typer.Option(help="Largest image side in px.")] = 4032,
    jobs: JobsOpt = None,
    quiet: QuietOpt = False,
    volumes: Annotated[
        Optional[Path], typer.Option(help="Also write CT-like NIfTI phantoms with labels here.")
    ] = None,
    video: Annotated[
        Optional[Path], typer.Option(help="Also write short clips of moving shapes here (PyAV).")
    ] = None,
    audio: Annotated[
        Optional[Path], typer.Option(help="Also write tones, chirps and noise in class folders.")
    ] = None,
) -> None:
    """Write a deterministic demo raw dataset: class folders of photo-like images, masks, text.

    Example: prep demo data/demo-raw --count 64 --seed 0; prep demo --volumes data/demo-ct
    """
    from prep.demo.images import make_demo

    if volumes is not None:
        from prep.demo.volumes import make_phantoms

        n = len(make_phantoms(_folder(volumes), seed=seed)) // 2
        typer.echo(
            f"{volumes}: {n} CT phantoms (one a DICOM series) in {volumes / 'images'}, "
            f"labels in {volumes / 'labels'}"
        )
    if video is not None:
        from prep.demo.video import make_video_demo

        n = len(make_video_demo(_folder(video), seed=seed))
        typer.echo(f"{video}: {n} clips of moving shapes in class folders (one VFR, one rotated)")
    if audio is not None:
        from prep.demo.audio import make_audio_demo

        n = len(make_audio_demo(_folder(audio), seed=seed))
        typer.echo(f"{audio}: {n} sound files (wav, flac, ogg, mp3) in class folders")
    if raw is None:
        if volumes is None and video is None and audio is None:
            raise UsageError(
                "prep demo needs RAW, --volumes DIR, --video DIR, --audio DIR, or some of them"
            )
        return
    make_demo(_folder(raw), count, seed, jobs or os.cpu_count() or 1, max_side, not quiet)
    typer.echo(
        f"{raw}: {count} images in {raw / 'images'}, masks in {raw / 'masks'}, "
        f"text in {raw / 'text'}; import sources: coco.json, captions.csv, hf/, wds/, tree/"
    )
