"""`prep import webdataset 'shards/train-{000000..000099}.tar' OUT`: WebDataset tars as samples
(prep.kinds.importers.wdssource reads them), a field an extension (wdssource.KINDS), `__key__`
the sample's key; the image extensions a sample has one of are the one field `image`.
"""

from __future__ import annotations

import posixpath
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from loaders.fields import Array, Bytes, Field, Json, Label, Text
from loaders.remote.storage import url_of
from prep.kinds.importers.config import WdsConfig, image_field
from prep.kinds.importers.hffeatures import NUMERIC, field_name
from prep.kinds.importers.source import SourceKind
from prep.kinds.importers.wdssource import (
    IMAGES,
    Declared,
    Scan,
    WdsSamples,
    expand,
    kind_of,
    let_go,
    scan,
)
from prep.run.config import listed
from prep.run.driver import RunSummary, run
from prep.run.errors import PrepError, UsageError
from prep.run.samples import Item
from prep.sources.samples import Source, file_stats


def list_shards(cfg: WdsConfig, image: Field) -> tuple[Source, WdsSamples, dict[str, Field]]:
    """The samples of cfg.src's tars as inputs, the function that reads one, and the fields."""
    src = str(cfg.src)  # a folder of .tar files, or a pattern
    if url_of(src) is None and Path(src).is_dir():
        paths = sorted(str(p) for p in Path(src).iterdir() if ".tar" in p.name)
    else:
        paths = expand(url_of(src) or src)
    cap = int(cfg.max_member_mb * 1e6)
    with ThreadPoolExecutor(8) as pool:  # headers: reads that wait on the disk or network
        scans = list(pool.map(lambda p: scan(p, cap), paths))
    if not any(s.samples for s in scans):
        first = next((f"{r['path']}: {r['message']}" for s in scans for r in s.rejects), "")
        raise PrepError(f"{cfg.src}: no sample to import ({first}). HINT: check the pattern")
    seen: dict[str, int] = {}
    for s in scans:
        for _, members in s.samples:
            for ext, _, _ in members:
                seen[ext] = seen.get(ext, 0) + 1
    declared = _declared(cfg, scans, seen)
    used = {e for d in declared for e in d.ext.split(";")}
    fields = {"__key__": Text()} | {d.name: _field(d, scans, image) for d in declared}
    items = [  # each sample's source: its tar's name and its key
        Item(f"{path}:{key}", (t, key, members), source=f"{posixpath.basename(path)}:{key}")
        for t, (path, s) in enumerate(zip(paths, scans, strict=True))
        for key, members in s.samples
    ]
    local = [Path(p) for p, s in zip(paths, scans, strict=True) if "://" not in p and s.samples]
    extra = {
        "webdataset": {
            "shards": paths,
            "fields": {d.name: d.ext for d in declared},
            "ignored": {e: n for e, n in seen.items() if e not in used},
        }
    }
    rejects = [r for s in scans for r in s.rejects]
    source = Source(items, {None: len(items)}, rejects, [*file_stats(local), *paths], extra)
    return source, WdsSamples(tuple(paths), declared), fields


def _declared(cfg: WdsConfig, scans: list[Scan], seen: dict[str, int]) -> tuple[Declared, ...]:
    """The fields: --fields (`jpg;png`: whichever a sample has, WebDataset's spelling) or every
    extension seen, the image extensions that no sample has two of as one field."""
    if cfg.fields:
        exts = listed(cfg.fields, "--fields", str)
    else:
        exts = sorted(seen)
        images = [e for e in exts if e in IMAGES]
        apart = not any(
            sum(ext in images for ext, _, _ in members) > 1
            for s in scans
            for _, members in s.samples
        )
        if len(images) > 1 and apart:
            exts = [";".join(images), *(e for e in exts if e not in images)]
    unknown = [a for e in exts for a in e.split(";") if a not in seen]
    if unknown or not exts:
        raise _usage(cfg.src, f"no member has extension {unknown[0]!r}" if unknown else "")
    if not cfg.fields:
        _check_rare(cfg, exts, seen, sum(len(s.samples) for s in scans))
    # The one field of image extensions (jpg, jpg;png...) is `image`, whichever the tars hold:
    # the loader's code does not change with the dataset. Two (a sample with both a .jpg and a
    # .png) keep their extensions' names.
    pictures = [e for e in exts if all(a in IMAGES for a in e.split(";"))]
    declared = []
    for e in exts:
        kinds = {kind_of(a) for a in e.split(";")}
        kind = kinds.pop() if len(kinds) == 1 else "bytes"
        name = "image" if pictures == [e] else field_name(e.split(";")[0])
        declared.append(Declared(name, e, kind))
    names = [d.name for d in declared]
    if len(set(names)) < len(names):
        raise _usage(cfg.src, f"--fields {cfg.fields} names field {names[0]!r} twice")
    return tuple(declared)


def _check_rare(cfg: WdsConfig, exts: list[str], seen: dict[str, int], total: int) -> None:
    """Every extension found is a field: one that so many samples lack that their rejects pass
    --max-rejects fails now, naming it and the --fields that leaves it out (not after the run)."""
    for e in exts:
        have = min(total, sum(seen.get(a, 0) for a in e.split(";")))
        if total - have > cfg.max_rejects * total:
            rest = ",".join(x for x in exts if x != e) or "..."
            raise UsageError(
                f"{cfg.src}: extension {e!r} is in {have} of {total} samples, and a sample "
                "without a field is a field_missing reject (more than --max-rejects "
                f"{cfg.max_rejects:g}). HINT: --fields '{rest}' leaves it out; --fields "
                f"'{','.join(exts)}' with a higher --max-rejects keeps only the samples that "
                "have it"
            )


def _usage(src: object, what: str) -> UsageError:
    return UsageError(f"{src}: {what}. HINT: check the shard pattern and --fields")


def _field(d: Declared, scans: list[Scan], image: Field) -> Field:
    """Declared field `d` as a field of prep.fields (an .npy's dtype and shape from the tars)."""
    if d.kind == "array":
        return _array(d, [h for s in scans for (_, ext), h in s.npy.items() if ext == d.ext])
    if d.kind == "image":
        return image
    kinds = {"label": Label, "text": Text, "json": Json}
    return kinds.get(d.kind, Bytes)()


def _array(d: Declared, headers: list[tuple[str, tuple[int, ...]]]) -> Array:
    """Array of the first sample's dtype; its shape if all share it, else a ragged leading
    dimension (samples whose other dimensions differ from the first's are rejects)."""
    if not headers:
        raise _usage(f"field {d.name}", "no .npy member that numpy reads")
    dtype, shape = headers[0]
    if dtype not in NUMERIC:
        raise _usage(f"field {d.name}", f"the first .npy holds {dtype}, not numbers")
    if all(s == shape for _, s in headers) or not shape:
        return Array(dtype, shape)
    return Array(dtype, (None, *shape[1:]))


def import_webdataset(
    cfg: WdsConfig, show_progress: bool = True, profile: bool = False
) -> RunSummary:
    """Pack the tars of `cfg.src` into `cfg.out`."""
    cfg.validate()
    source, samples, fields = list_shards(cfg, image_field(cfg))
    kind = SourceKind(cfg, samples, fields, source)
    try:
        return run(kind, show_progress, profile)
    finally:
        let_go(samples.run)
