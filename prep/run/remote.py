"""A remote OUT (any fsspec URL): built in a local staging folder, uploaded, the manifest put
last in one PUT (docs/machines.md, "Datasets on object storage"; docs/format.md, "A dataset at a
URL"). With --backend dask each worker uploads its own shards (`upload_own`). Every request goes
through loaders.remote.storage."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

from loaders.format import MANIFEST, REJECTS, ArrayRef, FormatError, Manifest, read_manifest
from loaders.remote.cache import default_cache_dir
from loaders.remote.storage import Storage, Url, url_of
from prep.run.card import CARD
from prep.run.errors import PrepError, UsageError
from prep.run.grow import STATE
from prep.run.staging import RUN_DIR, listed_files, staging_dir

MARKER = ".prep-upload.json"


def _remote_state(storage: Storage) -> tuple[dict[str, str], dict[str, int]]:
    """The old dataset's files (name -> sha256; an unfinished upload's names) and the remote
    listing (name -> bytes). Refuses files prep did not write."""
    try:
        have = storage.listing()
    except (FormatError, OSError) as e:
        raise PrepError(f"cannot list {storage.root}: {e}") from e
    old = _listed(storage) if MANIFEST in have else {}
    if MARKER in have:
        marker = json.loads(storage.read(MARKER))
        old |= {n: old.get(n, "") for n in (have if marker.get("workers") else marker["files"])}
    foreign = sorted(set(have) - set(old) - {MANIFEST, REJECTS, STATE, CARD, MARKER})
    if foreign:
        raise PrepError(
            f"{storage.root} holds files prep did not write ({', '.join(foreign[:3])}"
            f"{' ...' if len(foreign) > 3 else ''}). HINT: choose an empty or new OUT URL"
        )
    return old, have


def _listed(storage: Storage) -> dict[str, str]:
    """Name -> sha256 of the files the manifest at the URL lists."""
    from loaders.remote import open_remote

    found = open_remote(str(storage.root))
    assert found is not None  # a URL
    return listed_files(found[1])


def _renamed(m: Manifest, names: dict[str, str], url: str) -> Manifest:
    """The manifest as uploaded: files under their remote names (shards then listed inline)."""
    if all(n == r for n, r in names.items()):
        return dataclasses.replace(m, config=m.config | {"out": url})

    def moved(ref: ArrayRef) -> ArrayRef:
        off = ref.offsets and moved(ref.offsets)
        return dataclasses.replace(ref, file=names[ref.file], offsets=off)

    shards = [
        dataclasses.replace(
            s,
            arrays={k: moved(a) for k, a in s.arrays.items()},
            files={names[n]: f for n, f in s.files.items()},
        )
        for s in m.shards
    ]
    fields = dict(m.fields)
    for name, d in fields.items():  # a tokenizer moved with the others
        if isinstance(d.get("tokenizer"), str) and d["tokenizer"] in names:
            fields[name] = d | {"tokenizer": names[d["tokenizer"]]}
    config = m.config | {"out": url}
    return dataclasses.replace(m, shards=shards, fields=fields, index=None, config=config)


def put(storage: Storage, local: Path, name: str) -> None:
    """One data file up, as `name`: every upload of a run, the workers' too."""
    storage.put(local, name)


def remote_name(name: str, sha256: str, old: dict[str, str]) -> str:
    """Where file `name` goes: its own name, unless the old manifest lists it with other bytes."""
    return name if old.get(name, sha256) in (sha256, "") else f"v-{sha256[:12]}/{name}"


def upload(storage: Storage, local: Path, resume: bool) -> int:
    """The marker, the files (unless there already), the manifest, then the stale files go;
    how many files were uploaded."""
    old, have = _remote_state(storage)
    m = read_manifest(local)
    beside = {n: "" for n in (REJECTS, STATE, CARD) if (local / n).is_file()}  # not in the manifest
    files = listed_files(m) | beside
    if any(remote_name(n, sha, old) != n for n, sha in files.items()):  # listed inline: no index
        files = listed_files(m, index=False) | beside
    names = {n: remote_name(n, sha, old) for n, sha in files.items()}
    sizes = {n: f.bytes for s in m.shards for n, f in s.files.items()}
    storage.write(MARKER, json.dumps({"files": sorted(names.values())}).encode())
    sent = 0
    for name, remote in names.items():
        if not (local / name).is_file():  # a dask worker's shard: uploaded by the worker
            if have.get(remote) != sizes.get(name):
                raise FormatError(f"{storage.url(remote)} is missing: its worker did not upload it")
            continue
        size = (local / name).stat().st_size
        same = old.get(remote) == files[name] and files[name] != ""
        if have.get(remote) == size and (resume or same):
            continue
        put(storage, local / name, remote)
        sent += 1
    storage.write(MANIFEST, _renamed(m, names, str(storage.root)).to_json().encode())  # one PUT
    stale = sorted((set(old) | set(have)) - set(names.values()) - {MANIFEST, MARKER})
    for name in [*stale, MARKER]:
        storage.remove(name)
    return sent


def run_remote(kind: Any, run_local: Any, show_progress: bool, profile: bool) -> Any:
    """prep.run.driver.run for a remote OUT; its RunSummary."""
    cfg = kind.cfg
    url = url_of(cfg.out)
    if url is None:
        raise UsageError(
            f"--staging {cfg.staging}: only for a remote OUT (s3://, gs://, ...). HINT: drop it"
        )
    cfg.validate()
    storage = Storage(url)  # step 1, before any work
    if _remote_state(storage)[1] and not (cfg.overwrite or cfg.resume):
        raise PrepError(
            f"{url} already holds a dataset (or an unfinished upload). HINT: pass --overwrite "
            "to replace it (readers see the old one until the new manifest is put), or --resume"
        )
    base = Path(cfg.staging) if cfg.staging else default_cache_dir() / "staging"
    local = base.absolute() / f"{Url(url).name}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"
    if cfg.backend == "dask":  # the workers upload their own shards
        storage.write(MARKER, json.dumps({"workers": True}).encode())
        run = uuid.uuid4().hex  # the workers read the old manifest once a run
        folder = str(staging_dir(local))  # the driver's run folder
        kind.task = functools.partial(upload_own, type(kind).task, url, folder, run)
    saved = cfg.out, cfg.overwrite, cfg.staging
    cfg.out, cfg.overwrite, cfg.staging = str(local), not cfg.resume, None
    try:
        summary = run_local(kind, show_progress, profile)
    finally:
        cfg.out, cfg.overwrite, cfg.staging = saved
        vars(kind).pop("task", None)
    try:
        upload(storage, local, cfg.resume)
    except (OSError, FormatError) as e:
        raise PrepError(
            f"{url}: upload failed ({e}). HINT: rerun the same command with --resume: the "
            f"dataset built in {local} is kept and only the missing files are uploaded"
        ) from e
    summary.out = Url(url)
    return summary


_old_of_run: dict[str, dict[str, str]] = {}  # in a worker process: run -> its old files


def upload_own(task: Any, url: str, folder: str, run: str, *args: Any) -> dict[str, Any]:
    """A dask worker's shard task for a remote OUT: its files uploaded, then removed here."""
    Path(folder, RUN_DIR).mkdir(parents=True, exist_ok=True)  # a worker with a disk of its own
    record: dict[str, Any] = task(*args)
    storage = Storage(url)
    try:
        if run not in _old_of_run:
            _old_of_run.clear()
            _old_of_run[run] = _listed(storage) if storage.info(MANIFEST) is not None else {}
        for name, info in record["shard"]["files"].items():
            remote = remote_name(name, info["sha256"], _old_of_run[run])
            put(storage, Path(folder, name), remote)
            Path(folder, name).unlink()
    except (OSError, FormatError) as e:
        raise PrepError(
            f"{url}: a worker's upload failed ({e}). HINT: rerun the same command with --resume"
        ) from e
    return record
