"""The dataset card: README.md beside the manifest, in the Hugging Face card layout (YAML front
matter, then text). prep owns the front matter (but the `license` the user sets) and the block
between BEGIN and END; what the user writes outside them is kept. Like the manifest, the card
names no time and no machine path: the same dataset gives the same card."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from loaders.format import MANIFEST, Manifest, read_manifest
from loaders.format.schema import VERSIONS
from loaders.format.spec import is_sha256
from prep.run.files import atomic_write_text

CARD = "README.md"
BEGIN = "<!-- prep card: this block is rewritten by prep; write outside it -->"
END = "<!-- end of prep card -->"
SIZES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")]
SIZES += [(10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]
HIDDEN = ("src", "out", "staging", "masks", "recipe", "labels", "targets", "sources")  # paths


def size_category(n: int) -> str:
    """>>> size_category(999), size_category(1000)
    ('n<1K', '1K<n<10K')
    """
    return next((name for limit, name in SIZES if n < limit), "n>100M")


# The Hub's task category of a dataset: the first row whose field kinds it all has ("text":
# a text field other than `source`, the input's name; "target"/"value": a table's target with
# classes or a number)
TASKS = [
    ({"image", "mask"}, "image-segmentation"),
    ({"image", "instances"}, "image-segmentation"),
    ({"image", "boxes"}, "object-detection"),
    ({"image", "keypoints"}, "keypoint-detection"),
    ({"image", "label"}, "image-classification"),
    ({"image", "text"}, "image-to-text"),
    ({"volume", "volume_label"}, "image-segmentation"),
    ({"video", "label"}, "video-classification"),
    ({"audio", "label"}, "audio-classification"),
    ({"tokens"}, "text-generation"),
    ({"column", "target"}, "tabular-classification"),
    ({"column", "value"}, "tabular-regression"),
]


def task_category(m: Manifest) -> str:
    kinds = {str(d.get("kind")) for name, d in m.fields.items() if name != "source"}
    target = m.fields.get("target", {})
    if target.get("role") == "target":
        kinds.add("target" if target.get("vocab") else "value")
    return next((task for need, task in TASKS if need <= kinds), "other")


def is_ours(path: Path) -> bool:
    """Whether `path` is a card prep wrote (its block is there): --overwrite may replace it."""
    if path.is_symlink() or not path.is_file():  # a FIFO would block the read
        return False
    try:
        return BEGIN in path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


def kept(m: Manifest) -> list[np.ndarray | None]:
    """Each shard's samples not removed (`prep remove`'s tombstones: a bool mask), None where
    none is removed."""
    starts = np.concatenate([[0], np.cumsum(m.counts(), dtype=np.int64)])
    removed = np.asarray(m.removed, np.int64)
    at = np.searchsorted(starts, removed, side="right") - 1  # each removed sample's shard
    out: list[np.ndarray | None] = [None] * (len(starts) - 1)
    for i in sorted(set(at.tolist())):  # not np.unique: it imports numpy.ma (10 ms)
        mask = np.ones(int(starts[i + 1] - starts[i]), bool)
        mask[removed[at == i] - starts[i]] = False
        out[i] = mask
    return out


def recorded(m: Manifest, classes: list[str], splits: np.ndarray) -> dict[Any, list[int]] | None:
    """`extra.splits`' per-class counts (prep pack's, summed by each append), where they agree
    with the shards' counts; else None."""
    said, counts = m.extra.get("splits"), m.counts()
    if not isinstance(said, dict) or not m.splits:
        return None
    out = {}
    for split in dict.fromkeys(splits.tolist()):
        one = said.get(split)
        per = one.get("per_class") if isinstance(one, dict) else None
        n = int(counts[splits == split].sum())
        if not isinstance(per, list) or len(per) != len(classes) or sum(per) != n:
            return None
        out[split] = [int(k) for k in per]
    return out


def class_counts(root: Path, m: Manifest, masks: list[np.ndarray | None]) -> dict[Any, list[int]]:
    """Samples of each class of field `label` (a raw array a shard) by split (None: no split),
    read from its arrays, those `masks` keep; {} where there is no such field."""
    d = m.fields.get("label", {})
    classes = d.get("classes") if d.get("kind") == "label" else None
    if not classes or m.storage != "npy" or "label" not in m.arrays:
        return {}
    splits = m.split_of()
    said = recorded(m, classes, splits) if not any(k is not None for k in masks) else None
    if said is not None:  # pack and append keep them exact: no label array read
        return said
    totals = {s: np.zeros(len(classes), np.int64) for s in dict.fromkeys(splits.tolist())}
    for i, keep in enumerate(masks):
        try:
            ids = np.load(root / m.shards[i].arrays["label"].file, mmap_mode="r")
        except OSError:  # uploaded and removed by a dask worker (prep.run.remote): not counted
            return {}
        ids = np.asarray(ids if keep is None else ids[keep], np.int64)
        totals[splits[i]] += np.bincount(ids, minlength=len(classes))[: len(classes)]
    return {s: t.tolist() for s, t in totals.items()}


def history(root: Path) -> list[str]:
    """The versions, newest first: what made each. Not their sha256: a manifest records its OUT
    path, and the card is the same wherever the dataset is (`prep log` prints the hashes)."""
    data, lines = (root / MANIFEST).read_bytes(), []
    for _ in range(1000):  # a chain longer than this is cut (no loop can hang)
        d = json.loads(data)
        parent, extra = d.get("parent"), d.get("extra")
        command = d.get("command", "")
        made = (extra or {}).get("made_by") or (f"{command} --append" if parent else command)
        shown = int(d.get("num_samples") or 0) - len(d.get("removed") or [])  # tombstones out
        lines.append(f"- `prep {made}`, {shown} samples")
        kept = root / VERSIONS / str(parent) / MANIFEST
        if not is_sha256(parent) or not kept.is_file():
            break
        data = kept.read_bytes()
    return lines


def shown(value: object, limit: int = 60) -> str:
    """A declared value for the fields table, cut at `limit` characters (a 50k-word vocab)."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# The class made for each command's datasets, beside SampleDataset (which reads them all)
LOADER = {
    "pack": "ImageShardDataset(root, size={size})",
    "tokenize": 'TokenWindowDataset(root, block_size=256, split="{split}")',
    "table": 'TableDataset(root, split="{split}")',
    "volumes": "VolumeDataset(root)",
    "audio": "AudioDataset(root)",
    "video": "ClipDataset(root, frames=8)",
}


# The fields the numpy example reads first: a sample's data, then its label
MAIN = {"image": 0, "tokens": 0, "audio": 0, "video": 0, "volume": 0, "column": 1, "label": 2}


def crop_size(m: Manifest) -> int | None:
    """The crop a reader must pass: images of mode keep and videos of mode short or keep have
    their own shapes (None: every sample has the stored shape)."""
    for d in m.fields.values():
        if d.get("kind") == "image" and d.get("mode") == "keep":
            return int(min(d["sizes"]))
        if d.get("kind") == "video" and d.get("mode") in ("short", "keep"):
            return int(d["size"])
    return None


def load_code(m: Manifest) -> list[str]:
    """The card's "Load" section: with loaders, then with numpy alone (a shard's arrays)."""
    special = LOADER.get(m.command.split()[0] if m.command else "")
    sizes = m.fields.get("image", {}).get("sizes") or [None]
    made = special and special.format(size=sizes[0], split=(m.splits or ["train"])[0])
    cut = crop_size(m)
    crop = f", crop=CenterCrop({cut})" if cut else ""
    made = made[:-1] + crop + ")" if made else ""
    names = {"SampleDataset", "CenterCrop" if cut else "", made.split("(")[0]} - {""}
    out = ["```python", f"from loaders import {', '.join(sorted(names))}", "", 'root = "."']
    out += [f"ds = SampleDataset(root{crop})  # any dataset of prep's: a dict of fields a sample"]
    out += [f"ds = {made}"] * bool(made)
    out += ["```", "", "With numpy alone (the prep format's docs say how each kind is stored):"]
    out += ["", "```python", "import numpy as np", ""]
    if m.storage != "npy" or not len(m.shards):
        return [*out, 'index = np.load("shards.npy")  # a column a shard: count, split, ...', "```"]
    shard = m.shards[0]
    picked = sorted(m.fields, key=lambda f: MAIN.get(str(m.fields[f].get("kind")), 9))
    for field in picked[:2]:
        name = min((a for a, spec in m.arrays.items() if spec.field == field), default=None)
        if name is None:
            continue
        ref = shard.arrays[name]
        said = "class ids: names in the manifest's fields" if name == "label" else "shard 0"
        out += [f'{name} = np.load("{ref.file}", mmap_mode="r")  # {said}']
        if ref.offsets is not None:  # ragged: sample k is data[off[k]:off[k + 1]]
            out += [f'{name}_off = np.load("{ref.offsets.file}")']
            out += [f"{name}_0 = {name}[{name}_off[0] : {name}_off[1]]  # sample 0"]
    return [*out, "```"]


def block(root: Path, m: Manifest) -> str:
    """prep's part of the card: counts, fields, how it was made, history, how to load it."""
    kept_ = kept(m)
    counts = m.counts() - np.array([0 if k is None else int((~k).sum()) for k in kept_], np.int64)
    total = int(counts.sum())
    out = [BEGIN, f"{total} samples in {len(m.shards)} shards, written by `prep {m.command}`"]
    out += ["(prep format version 4: `manifest.json` describes every file)."]
    out += [f"{len(m.removed)} samples are removed (`prep compact` drops them)."] * bool(m.removed)
    out += ["", "## Counts", "", "| split | samples |", "| --- | --- |"]
    splits = m.split_of()
    for split in dict.fromkeys(splits.tolist()) or [None]:
        out.append(f"| {split or 'all'} | {int(counts[splits == split].sum())} |")
    per_split = class_counts(root, m, kept_)
    if per_split:  # a column a split where there are several
        heads = [str(s) for s in per_split] if len(per_split) > 1 else ["samples"]
        out += ["", f"| class | id | {' | '.join(heads)} |", "| --- " * (2 + len(heads)) + "|"]
        for i, c in enumerate(m.fields["label"]["classes"]):
            out.append(f"| {c} | {i} | {' | '.join(str(n[i]) for n in per_split.values())} |")
    out += ["", "## Fields", "", "| field | kind | declared |", "| --- | --- | --- |"]
    for field, d in m.fields.items():
        said = ", ".join(f"{k}={shown(v)}" for k, v in d.items() if k not in ("kind", "classes"))
        out.append(f"| `{field}` | {d.get('kind')} | {said} |")
    config = {k: v for k, v in sorted(m.config.items()) if k not in HIDDEN and v is not None}
    out += ["", "## How it was made", "", f"`prep {m.command}` with:", ""]
    out += [f"- `{k}`: `{shown(v)}`" for k, v in config.items()] or ["- its defaults"]
    out += ["", "## History", "", "Newest first; `prep log .` prints each version's hash, and"]
    out += ["`SampleDataset(root, version=HASH)` reads that version while its files are kept.", ""]
    out += [*history(root), "", "## Load", "", *load_code(m), END]
    return "\n".join(out) + "\n"


def front(m: Manifest, license_: str) -> str:
    return (
        f"---\nlicense: {license_}\ntask_categories:\n- {task_category(m)}\n"
        f"size_categories:\n- {size_category(m.num_samples)}\n---\n"
    )


def card_text(root: Path, m: Manifest, old: str | None) -> str:
    """The card of the dataset at `root`: prep's parts new, the user's parts of `old` kept (a new
    card's title is the user's to change: it is outside prep's block). No name of the folder:
    the same dataset has the same card wherever it is."""
    license_, before, after = "other  # set the dataset's license", "# Dataset card\n\n", ""
    if old is not None:
        head = re.match(r"---\n(.*?)\n---\n", old, re.S)
        found = re.search(r"^license:[ \t]*(.+)$", head.group(1), re.M) if head else None
        license_ = found.group(1).strip() if found else license_
        body = old[head.end() :] if head else old
        if BEGIN in body and END in body:
            before, after = body.split(BEGIN, 1)[0], body.split(END, 1)[1].lstrip("\n")
        else:
            before, after = "", body  # a card of the user's own: kept below prep's block
    return front(m, license_) + before + block(root, m) + ("\n" + after if after else "")


def write_card(root: Path, staging: Path | None = None) -> Path:
    """Write the card of the dataset in `staging` (else `root`) beside its manifest, keeping the
    user's parts of the card at `root`."""
    where = staging or root
    m = read_manifest(where)
    try:
        old: str | None = (root / CARD).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        old = None
    alone = staging is None  # a run folder's files are fsynced before its swap (guard.synced)
    atomic_write_text(where / CARD, card_text(where, m, old), alone, alone)
    return where / CARD
