"""Format versions 1-3, read as version 4 (docs/format.md, "Older versions"): a manifest's JSON
translated by its kind's translator (KINDS) into fields and its arrays' new names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loaders.format.spec import ArraySpec, FormatError, array_name, array_spec, count

CODECS = ("raw", "ragged", "jpeg")  # the codecs of versions 1 and 2
Json = dict[str, Any]


def upgrade(d: Json) -> Json:
    """Manifest `d` of version 1, 2 or 3 as a version 4 object, its shards inline."""
    version, kind = d["format_version"], d.get("kind")
    if (kind == "samples") != (version == 3):
        said = [3] if kind == "samples" else [1, 2]
        raise FormatError(
            f"format version {version} is not one of {said}. "
            "HINT: repack with this version of prep, or install the prep that wrote it."
        )
    if kind not in KINDS:
        raise FormatError(f"kind {kind!r} is not one of {tuple(KINDS)}")
    # pixels=False: a table's column index is no side in px
    arrays = {k: array_spec(k, v, pixels=False) for k, v in d["arrays"].items()}
    for name, spec in arrays.items():
        if spec.codec not in CODECS:
            raise FormatError(f"array {name}: codec {spec.codec!r} is not one of {CODECS}")
        if spec.ragged and version < 2:
            raise FormatError(f"array {name}: codec {spec.codec} needs format version 2")
    out: Json = {k: d[k] for k in ("format", "format_version", "storage") if k in d}
    out |= {k: d[k] for k in ("config", "rejects", "tool_version", "num_samples") if k in d}
    command, translate = KINDS[kind]
    extra = dict(d.get("extra", {}))  # an object: checked before (Manifest.from_dict)
    fields, renames = translate(arrays, extra, d.get("classes"), d.get("config", {}))
    out |= {"command": command, "fields": fields, "extra": extra, "arrays": {}}
    for name, spec in arrays.items():
        to = renames.get(name, name)
        if to is not None:
            recoded = {"codec": RECODED[kind, to][0]} if (kind, to) in RECODED else {}
            out["arrays"][to] = _renamed(spec, to) | recoded
    out["shards"] = [_shard(s, renames, kind) for s in d["shards"]]
    return out


# The arrays that became another codec, and the array whose offsets are now theirs: a token
# stream or voxels and their offsets array are one ragged array; the foreground index is flat.
RECODED = {("tokens", "tokens"): ("ragged", "doc_offsets"), ("volumes", "label_fg"): ("flat", None)}
RECODED |= {("volumes", name): ("ragged", "voxel_offsets") for name in ("image", "label")}
INDEXED = ("volume_target", "num", "cat", "missing")  # sized by a column's index, not in px


def _renamed(spec: ArraySpec, name: str) -> Json:
    """The entry of an array now called `name` (a column's size-free, hw_64 keeps its size)."""
    stored = spec.stored()
    if spec.field in INDEXED or (spec.size is None and name != spec.field):
        return stored | {"field": name, "size": None}
    if name != array_name(spec.field, spec.size):
        return stored | {"field": name.removesuffix(f"_{spec.size}")}
    return stored


def _shard(raw: Json, renames: dict[str, str | None], kind: str) -> Json:
    """A shard's record with its arrays renamed, and recoded (RECODED)."""
    arrays = {}
    for name, ref in raw["arrays"].items():
        to = renames.get(name, name)
        if to is not None:
            arrays[to] = dict(ref)
        if (kind, to) in RECODED:
            offsets = RECODED[kind, to][1]
            arrays[to]["offsets"] = raw["arrays"][offsets] if offsets else None
    return {**raw, "arrays": arrays}


def _images(arrays: dict[str, ArraySpec], extra: Json, classes: Any, config: Json) -> Any:
    sizes = sorted(s.size for s in arrays.values() if s.field == "image" and s.size)
    keep = any(s.field == "hw" for s in arrays.values())
    codecs = ["jpeg" if arrays[array_name("image", s)].codec == "jpeg" else "raw" for s in sizes]
    jpeg = extra.pop("jpeg", {}) if isinstance(extra.get("jpeg"), dict) else {}
    mode = "keep" if keep else config.get("mode", "fill")
    image: Json = {
        "kind": "image",
        "sizes": sizes,
        "mode": mode if mode in ("fill", "fit", "stretch", "keep") else "fill",
        "codec": codecs[0] if len(set(codecs)) == 1 else codecs,
        "gray": arrays[array_name("image", sizes[0])].shape[-1] == 1,
        "quality": _number(jpeg.get("quality", config.get("quality")), 90),
        "pad_value": _number(config.get("pad_value"), 0),
    }
    fields: Json = {"image": image}
    masks = sorted(s.size for s in arrays.values() if s.field == "mask" and s.size)
    if masks:
        fields["mask"] = {"kind": "mask", "image": "image", "sizes": masks, "mode": image["mode"]}
        fields["mask"]["pad_value"] = _number(config.get("mask_pad_value"), 0)
    if "label" in arrays:
        label = {"kind": "label", "classes": classes}
        fields["label"] = label if classes else {"kind": "label", "dtype": arrays["label"].dtype}
    fields |= {name: SIDECARS[name] for name in SIDECARS if name in arrays}
    if "stats" in extra:
        extra["stats"] = {"image": extra["stats"]}
    sides = [(name, s) for name, s in arrays.items() if s.field in ("hw", "crc")]
    return fields, {name: array_name(f"image_{s.field}", s.size) for name, s in sides}


SIDECARS = {  # the size-free arrays of an images dataset that are a field of their own
    "orig_size": {"kind": "array", "dtype": "uint32", "shape": [2], "wide": True},
    "source": {"kind": "text"},
    "phash": {"kind": "array", "dtype": "uint64", "shape": [], "wide": True},
    "digest": {"kind": "array", "dtype": "uint8", "shape": [32]},
}


def _number(value: Any, default: int) -> int:
    return value if count(value) else default


def _tokens(arrays: dict[str, ArraySpec], extra: Json, classes: Any, config: Json) -> Any:
    tok = extra.pop("tokenizer", {}) or {}
    fields: Json = {
        "tokens": {
            "kind": "tokens",
            "vocab_size": extra.pop("vocab_size"),
            "eot_id": extra.pop("eot_id"),
            "tokenizer": tok.get("file"),
            "tokenizer_name": tok.get("name"),
            "tokenizer_sha256": tok.get("sha256"),
        }
    }
    extra.pop("splits", None)  # counted from the shards
    if "source" in arrays:
        fields["source"] = SIDECARS["source"]
    return fields, {"doc_offsets": None}


def _volumes(arrays: dict[str, ArraySpec], extra: Json, classes: Any, config: Json) -> Any:
    image: Json = {"kind": "volume", "dtype": arrays["voxels"].dtype}
    image["orient"] = str(extra.pop("orient", "RAS"))
    fields: Json = {"image": image}
    renames: dict[str, str | None] = {"voxels": "image", "volume_shape": "image_shape"}
    renames["voxel_offsets"] = None  # the voxels' offsets (_shard)
    if "label_voxels" in arrays:
        fg = "fg_voxels" in arrays
        fields["label"] = {"kind": "volume_label", "volume": "image", "foreground": fg}
        renames |= {"label_voxels": "label", "fg_voxels": "label_fg"}
        renames["fg_offsets"] = "label_fg_offsets"
    for t in extra.pop("targets", None) or []:
        fields[t["array"]] = {
            "kind": "column",
            "name": str(t.get("column", t["array"])),
            "role": "target",
            "dtype": arrays[t["array"]].dtype,
            "vocab": t.get("classes"),
            "first_code": 0 if t.get("classes") is not None else None,
        }
    return fields, renames


def _table(arrays: dict[str, ArraySpec], extra: Json, classes: Any, config: Json) -> Any:
    columns = {c["name"]: c for c in extra.pop("columns")}
    stored = extra.pop("arrays")
    masked = {stored[n] for n, s in arrays.items() if s.field == "missing"}
    fields: Json = {}
    renames: dict[str, str | None] = {}
    for name, s in arrays.items():
        if s.field == "missing":
            renames[name] = f"num_{s.size}_missing"
            continue
        c = columns[stored[name]]
        said = {k: v for k, v in c.items() if k not in ("kind", "dtype")}
        fields[name] = {"kind": "column", **said, "type": c["kind"], "dtype": s.dtype}
        fields[name]["mask"] = c["name"] in masked and s.field == "num"
    target = extra.pop("target", None)
    extra.pop("splits", None)
    if target is not None:
        extra["target"] = target
    return fields, renames


def _samples(arrays: dict[str, ArraySpec], extra: Json, classes: Any, config: Json) -> Any:
    fields = dict(extra.pop("fields", None) or {})
    if not isinstance(fields, dict) or not fields:
        raise FormatError("extra.fields is not a mapping of field names")
    audio = extra.pop("audio", None)
    if isinstance(audio, dict) and isinstance(fields.get("audio"), dict):
        a = fields["audio"]
        said = {k: audio.get(k) for k in ("channels", "rate", "max_seconds", "resampler")}
        mono = list(a.get("shape", [])) == [None]
        fields["audio"] = {"kind": "audio", "dtype": a.get("dtype"), **said, "mono": mono}
    video = extra.pop("video", None)
    named = False
    for name, f in fields.items():
        if isinstance(f, dict) and f.get("kind") == "video" and isinstance(video, dict):
            fields[name] = {**f, "max_frames": video.get("max_frames")}
        if isinstance(f, dict) and f.get("kind") == "label" and classes and not f.get("classes"):
            fields[name], named = {**f, "classes": classes}, True
    labels = fields.get("labels")
    if classes and not named and isinstance(labels, dict) and labels.get("kind") == "array":
        fields["labels"] = {**labels, "kind": "labels", "classes": classes}  # COCO's, a box each
    return fields, {}


# Each kind's command (what wrote it) and its translation into fields
KINDS: dict[str, tuple[str, Callable[..., tuple[Json, dict[str, str | None]]]]] = {
    "images": ("pack", _images),
    "tokens": ("tokenize", _tokens),
    "volumes": ("volumes", _volumes),
    "table": ("table", _table),
    "samples": ("samples", _samples),
}
