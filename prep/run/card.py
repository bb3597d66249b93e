"""The dataset card: README.md beside the manifest, in the Hugging Face card layout (YAML front
matter, then text). prep owns the front matter (but the `license` the user sets) and the block
between BEGIN and END; what the user writes outside them is kept. Like the manifest, the card
names no time and no machine path: the same dataset gives the same card."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

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


def task_category(m: Manifest) -> str:
    kinds = {d.get("kind") for d in m.fields.values()}
    if "image" in kinds:
        if "mask" in kinds:
            return "image-segmentation"
        if "boxes" in kinds:
            return "object-detection"
        return "image-classification" if "label" in kinds else "image-to-text"
    if "tokens" in kinds:
        return "text-generation"
    if "audio" in kinds:
        return "audio-classification"
    return "tabular-classification" if "column" in kinds else "other"


def is_ours(path: Path) -> bool:
    """Whether `path` is a card prep wrote (its block is there): --overwrite may replace it."""
    if path.is_symlink() or not path.is_file():  # a FIFO would block the read
        return False
    try:
        return BEGIN in path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


def class_counts(root: Path, m: Manifest) -> list[tuple[str, int]]:
    """(class, samples) of field `label` (a raw array a shard), read from its arrays."""
    d = m.fields.get("label", {})
    classes = d.get("classes") if d.get("kind") == "label" else None
    if not classes or m.storage != "npy" or "label" not in m.arrays:
        return []
    total = np.zeros(len(classes), np.int64)
    for i in range(len(m.shards)):
        ids = np.load(root / m.shards[i].arrays["label"].file, mmap_mode="r")
        total += np.bincount(np.asarray(ids, np.int64), minlength=len(classes))[: len(classes)]
    return list(zip(classes, total.tolist(), strict=True))


def history(root: Path) -> list[str]:
    """The versions, newest first: sha256 prefix and what made each."""
    data, lines = (root / MANIFEST).read_bytes(), []
    for _ in range(1000):  # a chain longer than this is cut (no loop can hang)
        d = json.loads(data)
        sha, parent, extra = hashlib.sha256(data).hexdigest(), d.get("parent"), d.get("extra")
        command = d.get("command", "")
        made = (extra or {}).get("made_by") or (f"{command} --append" if parent else command)
        lines.append(f"- `{sha[:12]}`: `prep {made}`, {d.get('num_samples')} samples")
        kept = root / VERSIONS / str(parent) / MANIFEST
        if not is_sha256(parent) or not kept.is_file():
            break
        data = kept.read_bytes()
    return lines


def block(root: Path, m: Manifest, name: str) -> str:
    """prep's part of the card: counts, fields, how it was made, history, how to load it."""
    out = [BEGIN, f"# {name}", ""]
    out += [f"{m.num_samples} samples in {len(m.shards)} shards, written by `prep {m.command}`"]
    out += ["(prep format version 4: `manifest.json` describes every file).", "", "## Counts", ""]
    counts = m.counts()
    splits = m.split_of()
    out += ["| split | samples |", "| --- | --- |"]
    for split in dict.fromkeys(splits.tolist()) or [None]:
        out.append(f"| {split or 'all'} | {int(counts[splits == split].sum())} |")
    per_class = class_counts(root, m)
    if per_class:
        out += ["", "| class | id | samples |", "| --- | --- | --- |"]
        out += [f"| {c} | {i} | {n} |" for i, (c, n) in enumerate(per_class)]
    out += ["", "## Fields", "", "| field | kind | declared |", "| --- | --- | --- |"]
    for field, d in m.fields.items():
        said = ", ".join(f"{k}={v}" for k, v in d.items() if k != "kind" and k != "classes")
        out.append(f"| `{field}` | {d.get('kind')} | {said} |")
    shown = {k: v for k, v in sorted(m.config.items()) if k not in HIDDEN and v is not None}
    out += ["", "## How it was made", "", f"`prep {m.command}` with:", ""]
    out += [f"- `{k}`: `{v}`" for k, v in shown.items()] or ["- its defaults"]
    out += ["", "## History", "", *history(root), "", "## Load", "", "```python"]
    out += ["from loaders import SampleDataset", "", f'ds = SampleDataset("{name}")', "```"]
    first = next(iter(m.fields))
    out += ["", "With numpy alone (FORMAT.md of prep says how each field kind is stored):", ""]
    out += ["```python", "import json", "", "import numpy as np", ""]
    out += [f'manifest = json.load(open("{name}/manifest.json"))']
    out += [f'shards = np.load("{name}/shards.npy")  # a column a shard: count, split, task, ...']
    out += [f"# field {first!r}: arrays {sorted(a for a in m.arrays if a.startswith(first))}"]
    out += ["```", END]
    return "\n".join(out) + "\n"


def front(m: Manifest, license_: str) -> str:
    return (
        f"---\nlicense: {license_}\ntask_categories:\n- {task_category(m)}\n"
        f"size_categories:\n- {size_category(m.num_samples)}\n---\n"
    )


def card_text(root: Path, m: Manifest, old: str | None, name: str) -> str:
    """The card of the dataset at `root`: prep's parts new, the user's parts of `old` kept."""
    license_, before, after = "other  # set the dataset's license", "", ""
    if old is not None:
        head = re.match(r"---\n(.*?)\n---\n", old, re.S)
        found = re.search(r"^license:[ \t]*(.+)$", head.group(1), re.M) if head else None
        license_ = found.group(1).strip() if found else license_
        body = old[head.end() :] if head else old
        if BEGIN in body and END in body:
            before, after = body.split(BEGIN, 1)[0], body.split(END, 1)[1].lstrip("\n")
        else:
            after = body  # a card of the user's own: kept below prep's block
    return front(m, license_) + before + block(root, m, name) + ("\n" + after if after else "")


def write_card(root: Path, staging: Path | None = None) -> Path:
    """Write the card of the dataset in `staging` (else `root`) beside its manifest, keeping the
    user's parts of the card at `root`."""
    where = staging or root
    m = read_manifest(where)
    try:
        old: str | None = (root / CARD).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        old = None
    atomic_write_text(where / CARD, card_text(where, m, old, root.name))
    return where / CARD
