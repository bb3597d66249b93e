"""`prep import hf SRC OUT`: a Hugging Face dataset saved to disk (`save_to_disk`) or a folder
of its Parquet files, as samples: a field a feature (prep.kinds.importers.hffeatures has the table),
each split in its own shards. Read with pyarrow: `datasets` is not needed.

The manifest records the source's features (`extra.hf.features`), which column each field
holds (`extra.hf.columns`) and each split's count (`extra.splits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from prep.kinds.importers.config import PathsConfig, image_field
from prep.run.config import listed, opt


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


def import_hf(cfg: HFConfig, show_progress: bool = True, profile: bool = False) -> Any:
    """Pack `cfg.src` into `cfg.out`; the RunSummary."""
    from prep.kinds.importers.hfsource import forget, list_source
    from prep.kinds.importers.source import run_source
    from prep.run.errors import UsageError

    cfg.validate()
    src = Path(str(cfg.src))
    if not src.is_dir():
        raise UsageError(f"{src}: not a folder. HINT: give a save_to_disk or Parquet folder")
    splits = listed(cfg.splits, "--splits", str) if cfg.splits else None
    only = listed(cfg.columns, "--columns", str) if cfg.columns else None
    source, rows = list_source(src, splits, only, cfg.allow_outside)
    image = image_field(cfg)
    fields = {c.name: c.field or image for c in rows.columns}
    try:
        return run_source("import hf", cfg, rows, fields, source, show_progress, profile)
    finally:
        forget()
