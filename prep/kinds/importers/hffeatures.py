"""Hugging Face JSON, checked (one error line naming the file): `dataset_dict.json`, `state.json`,
and `Features` as fields (a dict's keys as fields `NAME_KEY`); a feature no field holds is
`Unsupported`, named.

>>> [c.name for c in columns_of({"obj": {"bbox": {"_type": "Array2D", "shape": [None, 4],
...     "dtype": "float32"}, "n": {"_type": "Value", "dtype": "int64"}}}, None)]
['obj_bbox', 'obj_n']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loaders.fields import Array, Bytes, Field, Json, Label, Scalar, Text
from loaders.fields.base import check_name
from loaders.format.spec import NUMBERS
from prep.kinds.importers.config import Tree
from prep.run.errors import PrepError, Reject, UsageError
from prep.run.inputs import load_json
from prep.run.samples import SOURCE

NUMERIC = (*NUMBERS, "float64", "bool")
ALIASES = {"float": "float32", "double": "float64", "half": "float16"}
LISTS = ("List", "LargeList", "Sequence")
ARRAYS = ("Array2D", "Array3D", "Array4D", "Array5D")
Step = tuple[str, str]  # ("key", k): value[k]; ("each", k): [x[k] for x in value]


class Unsupported(ValueError):
    """A feature no field kind holds: `str()` names its column and its type."""


@dataclass(frozen=True)
class Column:
    """A field of the import: where its value sits in a row, and how it is converted."""

    name: str
    path: tuple[Step, ...]
    field: Field | None  # None: the command's Image field
    convert: str  # "value", "image" or "array"

    def source(self) -> str:
        return ".".join(k if op == "key" else f"[].{k}" for op, k in self.path)


def columns_of(features: dict[str, Any], root: Path | None) -> list[Column]:
    """The import's fields, in the features' order; Unsupported for a feature none holds."""
    if not isinstance(features, dict):
        raise Unsupported(f"features are a {type(features).__name__}, not column -> feature")
    out: list[Column] = []
    for name, f in features.items():
        try:
            out += _columns(field_name(name), (("key", name),), f)
        # A feature without its keys, or with values of another type (a length of Infinity).
        except (KeyError, TypeError, AttributeError, OverflowError) as e:
            said = f"a malformed feature ({type(e).__name__}: {e})"
            raise Unsupported(f"column {name}: {said}") from None
        except ValueError as e:  # Unsupported itself, or what a field refuses (its names...)
            said = str(e)
            said = said if said.startswith("column ") else f"column {name}: {said}"
            raise Unsupported(said) from None
    names = [c.name for c in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise Unsupported(f"columns give field {twice[0]!r} twice (names made identifiers)")
    return out


def field_name(column: str) -> str:
    """A column's name as an identifier; a reserved one (`index`, `NAME_len`, `source`) gets `_`."""
    name = re.sub(r"\W", "_", column) or "_"
    name = "c_" + name if name[0].isdigit() else name
    return name if check_name(name) is None and name != SOURCE else name + "_"


def _columns(name: str, path: tuple[Step, ...], f: Any) -> list[Column]:
    if isinstance(f, list) and len(f) == 1:  # datasets' old spelling of a list: [feature]
        f = {"_type": "List", "feature": f[0]}
    if isinstance(f, dict) and "_type" not in f:  # a struct: a field a key
        return [
            c
            for k, sub in f.items()
            for c in _columns(f"{name}_{field_name(k)}", (*path, ("key", k)), sub)
        ]
    kind = f.get("_type") if isinstance(f, dict) else type(f).__name__
    if kind == "Image":
        return [Column(name, path, None, "image")]
    if kind == "ClassLabel":
        return [Column(name, path, Label(tuple(_key(f, "names", list, name))), "value")]
    if kind == "Value":
        return [Column(name, path, _value(_key(f, "dtype", str, name), name), "value")]
    if kind in ARRAYS:
        return [Column(name, path, Array(_numeric(f["dtype"], name), tuple(f["shape"])), "array")]
    if kind in LISTS:
        return _list(name, path, f)
    raise Unsupported(f"column {name}: feature {kind}, which no field holds")


def _key(f: dict[str, Any], key: str, kind: type, name: str) -> Any:
    """`f[key]`, which must be a `kind`."""
    v = f.get(key)
    if not isinstance(v, kind) or (isinstance(v, list) and not all(isinstance(x, str) for x in v)):
        what = "a list of names" if kind is list else f"a {kind.__name__}"
        raise Unsupported(f"column {name}: feature {f.get('_type')} without {key!r} ({what})")
    return v


def _list(name: str, path: tuple[Step, ...], f: dict[str, Any]) -> list[Column]:
    inner, length = f["feature"], f.get("length", -1)
    if isinstance(inner, dict) and "_type" not in inner:  # a list of structs: a list a key
        op = "key" if f["_type"] == "Sequence" else "each"  # Sequence(dict) is a dict of lists
        return [
            c
            for k, sub in inner.items()
            for c in _columns(
                f"{name}_{field_name(k)}",
                (*path, (op, k)),
                {"_type": "List", "feature": sub, "length": length},
            )
        ]
    try:
        shape = _shape(f)
    except Unsupported as e:
        raise Unsupported(f"column {name}: {e}") from None
    if shape is None:
        return [Column(name, path, Json(), "value")]
    dtype, dims = shape
    return [Column(name, path, Array(dtype, tuple(dims)), "array")]


def _shape(f: Any) -> tuple[str, list[int | None]] | None:
    """dtype and dims of a list of numbers (None: a ragged dim, first only); None for strings
    or ragged inner lists (Json holds them)."""
    dims: list[int | None] = []
    while isinstance(f, dict) and f.get("_type") in LISTS:
        length = f.get("length", -1)
        dims.append(None if length is None or length < 0 else int(length))
        f = f["feature"]
    kind = f.get("_type") if isinstance(f, dict) else None
    if kind == "ClassLabel":
        dtype = "int64"
    elif kind == "Value" and ALIASES.get(f["dtype"], f["dtype"]) in NUMERIC:
        dtype = ALIASES.get(f["dtype"], f["dtype"])
    elif kind == "Value" and f["dtype"] in ("string", "large_string"):
        return None
    else:
        raise Unsupported(f"a list of {kind or type(f).__name__}, which no field holds")
    return (dtype, dims) if None not in dims[1:] else None


def _value(dtype: str, name: str) -> Field:
    if dtype in ("string", "large_string"):
        return Text()
    if dtype in ("binary", "large_binary"):
        return Bytes()
    return Scalar(_numeric(dtype, name))


def _numeric(dtype: str, name: str) -> str:
    dtype = ALIASES.get(dtype, dtype)
    if dtype not in NUMERIC:
        raise Unsupported(f"column {name}: feature Value({dtype!r}), which no field holds")
    return dtype


def _feature_of_type(t: Any) -> Any:
    """The feature a pyarrow type implies (a Parquet file without Hugging Face metadata)."""
    import pyarrow as pa  # only here: wds imports this module without pyarrow

    if pa.types.is_struct(t):
        names = sorted(t.field(i).name for i in range(t.num_fields))
        if names == ["bytes", "path"]:
            return {"_type": "Image"}
        return {t.field(i).name: _feature_of_type(t.field(i).type) for i in range(t.num_fields)}
    if pa.types.is_fixed_size_list(t):
        return {"_type": "List", "feature": _feature_of_type(t.value_type), "length": t.list_size}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"_type": "List", "feature": _feature_of_type(t.value_type)}
    name = {"float": "float32", "double": "float64", "halffloat": "float16"}.get(str(t), str(t))
    return {"_type": "Value", "dtype": "string" if name == "large_string" else name}


def value_of(row: dict[str, Any], column: Column, tree: Tree) -> Any:
    """`column`'s value in `row` as its field takes it; an Image's path is relative to `tree`."""
    v: Any = row
    for op, key in column.path:
        if v is None:
            return None
        v = v[key] if op == "key" else [x[key] for x in v]
    if v is None:
        return None
    if column.convert == "image":
        data, path = v.get("bytes"), v.get("path")
        if data is not None or path is None:
            return data
        why = tree.why(str(path))
        if why is not None:
            raise Reject(f"field {column.name}: the Image's path {why}", "outside")
        return tree.root / path
    if column.convert == "array":
        assert isinstance(column.field, Array)
        arr = np.asarray(v, dtype=column.field.dtype)
        return arr.reshape(0, *column.field.row) if arr.size == 0 else arr
    return v


def read_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`."""
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


def features_of(part: Path, schema: Any) -> dict[str, Any]:
    """The `Features` JSON of a file: its schema's, dataset_info.json's, else the schema's types."""
    meta = (schema.metadata or {}).get(b"huggingface")
    if meta:
        features = meta_features(meta, f"{part} (its schema's huggingface metadata)")
        if features:
            return features
    info = part.parent / "dataset_info.json"
    if info.is_file():
        features = read_object(info).get("features")
        if features:
            return checked_features(features, str(info))
    return {f.name: _feature_of_type(f.type) for f in schema}
