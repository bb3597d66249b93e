"""Listing videos: a folder (class sub-folders give labels, as for images) or a CSV/JSONL
list with `path` and an optional `label` (prep.sources.images reads lists)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prep.run.errors import PrepError
from prep.sources.images import Item, list_file, list_folder

VIDEO_EXTS = frozenset(
    ".mp4 .m4v .mov .mkv .webm .avi .mpg .mpeg .ts .flv .wmv .3gp .ogv .gif".split()  # noqa: SIM905
)


def list_videos(
    src: Path, limit: int | None = None
) -> tuple[list[Item], list[str] | None, list[dict[str, Any]]]:
    """Every video of SRC, in a fixed order: (items, class names or None, rejects)."""
    if not src.exists():
        raise PrepError(f"{src} does not exist. HINT: pass a folder of videos or a .csv list")
    if src.is_file():
        if src.suffix.lower() not in (".csv", ".jsonl", ".json"):
            raise PrepError(
                f"{src} is not a folder or a .csv/.jsonl list of videos. HINT: pass the folder "
                f"that holds it ({src.parent}), or list it in a CSV with a path column"
            )
        return list_file(src, limit)
    items, classes, rejects = list_folder(src, VIDEO_EXTS, "video")
    return items[:limit], classes, rejects
