"""The JSON files of a Hugging Face `save_to_disk` folder, checked: `dataset_dict.json` (its
splits), `state.json` (its data files and split), the features in `dataset_info.json` or in a
file's `huggingface` schema metadata. Plain functions of the parsed JSON (or its bytes), each
raising PrepError (UsageError for features) with one line naming the file: never a KeyError,
TypeError or RecursionError from a malformed or hostile file.

>>> state_files({"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": "train"},
...     "state.json")
(['data-00000-of-00001.arrow'], 'train')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prep.run.errors import PrepError, UsageError
from prep.run.inputs import load_json


def read_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; one error line for anything else."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PrepError(f"{path}: cannot read it ({e.strerror})") from e
    found = load_json(data, str(path))
    if not isinstance(found, dict):
        raise PrepError(f"{path}: a JSON {type(found).__name__}, not an object")
    return found


def dict_splits(data: dict[str, Any], where: str) -> list[str]:
    """The split names of a dataset_dict.json (`data`, read from `where`)."""
    splits = data.get("splits", [])
    if not isinstance(splits, list) or not all(isinstance(s, str) and s for s in splits):
        raise PrepError(
            f"{where}: 'splits' is not a list of split names. HINT: is it the file "
            "DatasetDict.save_to_disk wrote?"
        )
    return splits


def state_files(data: dict[str, Any], where: str) -> tuple[list[str], str | None]:
    """The data files a state.json (`data`, read from `where`) lists, and its split."""
    files, split = data.get("_data_files", []), data.get("_split")
    files = files if isinstance(files, list) else [None]
    names = [d.get("filename") if isinstance(d, dict) else None for d in files]
    kept = [n for n in names if isinstance(n, str) and n]
    if len(kept) != len(names) or not isinstance(split, (str, type(None))):
        raise PrepError(
            f"{where}: '_data_files' is not a list of {{\"filename\": ...}} (or '_split' not a "
            "name). HINT: is it the file Dataset.save_to_disk wrote?"
        )
    return kept, split


def meta_features(meta: bytes, where: str) -> dict[str, Any] | None:
    """The features in a file's `huggingface` schema metadata (None when it has none)."""
    found = load_json(meta, where)
    info = found.get("info") if isinstance(found, dict) else None
    features = info.get("features") if isinstance(info, dict) else None
    return checked_features(features, where) if features else None


def checked_features(features: Any, where: str) -> dict[str, Any]:
    """`features` as the dict of column -> feature it must be."""
    if not isinstance(features, dict):
        raise UsageError(
            f"{where}: features are a JSON {type(features).__name__}, not an object of column "
            "-> feature. HINT: is it the file `datasets` wrote?"
        )
    return features
