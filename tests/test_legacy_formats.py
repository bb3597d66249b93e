"""Datasets packed by earlier code still load with the same values: the fixtures in
tests/legacy/packed/ (format versions 1 and 2 for images, tokens, volumes and tables; version 3
for samples, imports, audio and video) were written once by tests/legacy/make_fixtures.py, and
tests/legacy/expected.json holds what the dataset classes returned for each read of CASES then.

Each case opens a fixture with a public dataset class and reads every item (`ds[i]`), every
batch of `make_loader` (a few cross a shard's end) and the attributes it names; each tensor is
kept as its dtype, shape and the sha256 of its bytes. Crops name their ratio, so that a change of
CenterCrop's default does not read as a change of format. The fixtures are read-only: a test
that writes copies one to tmp_path first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from typer.testing import CliRunner

from loaders import (
    AudioDataset,
    CenterCrop,
    ClipDataset,
    DocumentDataset,
    ImageShardDataset,
    PatchDataset,
    RandomResizedCrop,
    SampleDataset,
    TableDataset,
    TokenWindowDataset,
    VolumeDataset,
    make_loader,
)
from prep.cli.main import app

LEGACY = Path(__file__).parent / "legacy"
PACKED = LEGACY / "packed"


class Case(NamedTuple):
    fixture: str  # a folder of tests/legacy/packed
    open: Callable[[Path], Any]  # the dataset, from the fixture's path
    attrs: tuple[str, ...] = ()  # attributes of the dataset to compare
    more: Callable[[Any], dict[str, Any]] | None = None  # other calls, by name
    batch: int = 5  # make_loader's batch size; 0: no batches (samples of their own shapes)
    epochs: tuple[int, ...] = (0,)  # read again after set_epoch(e) (crops, windows, patches)


def sources(ds: Any) -> dict[str, Any]:
    return {"source": [ds.source(i) for i in range(len(ds))]}


IMAGE_FIELDS = ("image", "mask", "label", "orig_size")
HASHES = ("phash", "digest")
TOKENS = ("vocab_size", "eot_id", "num_tokens")
TABLE = ("numeric_columns", "categorical_columns", "target", "vocab", "mean", "std", "classes")
TABLE_CALLS: Callable[[Any], dict[str, Any]] = lambda ds: {  # noqa: E731
    "num_classes": ds.num_classes,
    "embedding_sizes": ds.embedding_sizes(),
    "decode": {c: ds.decode(c, list(range(len(ds.vocab[c]) + 2))) for c in ds.categorical_columns},
}

CASES: dict[str, Case] = {
    # images, version 2: raw at two sizes with masks and the perceptual hashes
    "images-raw/24": Case(
        "images-raw",
        lambda r: ImageShardDataset(r, size=24, fields=(*IMAGE_FIELDS, *HASHES, "index")),
        attrs=("classes", "sizes"),
        more=sources,
    ),
    "images-raw/16-in-memory": Case(
        "images-raw", lambda r: ImageShardDataset(r, size=16, fields=IMAGE_FIELDS, in_memory=True)
    ),
    # mode fit, JPEG at 32 px and raw at 16
    "images-jpeg/32": Case(
        "images-jpeg",
        lambda r: ImageShardDataset(r, size=32, fields=(*IMAGE_FIELDS, *HASHES)),
        attrs=("classes", "sizes"),
        more=sources,
    ),
    "images-jpeg/32-in-memory": Case(
        "images-jpeg", lambda r: ImageShardDataset(r, size=32, fields=("image",), in_memory=True)
    ),
    "images-jpeg/16": Case(
        "images-jpeg", lambda r: ImageShardDataset(r, size=16, fields=("image", "mask"))
    ),
    # mode keep: JPEG at 32 px, ragged raw at 20, masks; read through crops
    "images-keep/32-center": Case(
        "images-keep",
        lambda r: ImageShardDataset(
            r, size=32, fields=(*IMAGE_FIELDS, "index"), crop=CenterCrop(24, ratio=0.875)
        ),
        attrs=("classes", "sizes"),
        more=sources,
    ),
    "images-keep/20-center-in-memory": Case(
        "images-keep",
        lambda r: ImageShardDataset(
            r, size=20, fields=IMAGE_FIELDS, crop=CenterCrop(16, ratio=1.0), in_memory=True
        ),
    ),
    "images-keep/32-random": Case(
        "images-keep",
        lambda r: ImageShardDataset(
            r, size=32, fields=("image", "mask"), crop=RandomResizedCrop(16, seed=0)
        ),
        epochs=(0, 1),
    ),
    "images-keep/20-random-in-memory": Case(
        "images-keep",
        lambda r: ImageShardDataset(
            r,
            size=20,
            fields=("image", "mask"),
            crop=RandomResizedCrop((12, 16), seed=3),
            in_memory=True,
        ),
    ),
    "images-keep-raw": Case(
        "images-keep-raw",
        lambda r: ImageShardDataset(r, fields=IMAGE_FIELDS[::2], crop=CenterCrop(20, ratio=1.0)),
        attrs=("classes", "sizes"),
        more=sources,
    ),
    # one channel (JPEG at 24 px, raw at 16), splits from train/ and val/ folders, mode stretch
    "images-gray-splits/24": Case(
        "images-gray-splits",
        lambda r: ImageShardDataset(r, size=24, fields=("image", "label", *HASHES, "index")),
        attrs=("classes", "sizes"),
        more=sources,
    ),
    "images-gray-splits/16-train": Case(
        "images-gray-splits",
        lambda r: ImageShardDataset(r, size=16, fields=("image", "label", "index"), split="train"),
        more=sources,
    ),
    "images-gray-splits/24-val-in-memory": Case(
        "images-gray-splits",
        lambda r: ImageShardDataset(r, size=24, split="val", in_memory=True),
        more=sources,
    ),
    # HDF5 shards, --val-fraction, --shuffle-seed
    "images-h5/val": Case(
        "images-h5",
        lambda r: ImageShardDataset(r, fields=(*IMAGE_FIELDS, *HASHES), split="val"),
        attrs=("classes",),
        more=sources,
    ),
    "images-h5/train-in-memory": Case(
        "images-h5",
        lambda r: ImageShardDataset(r, fields=IMAGE_FIELDS, split="train", in_memory=True),
        more=sources,
    ),
    # integer labels from a CSV list: no class names; no hashes
    "images-int-labels": Case(
        "images-int-labels",
        lambda r: ImageShardDataset(r, fields=("image", "label", "orig_size", "index")),
        attrs=("classes", "sizes"),
        more=sources,
    ),
    # format version 1 (no codecs, no sources): packed by the code that wrote it, and a version 2
    # pack rewritten to it
    "images-v1/24": Case(
        "images-v1",
        lambda r: ImageShardDataset(r, size=24, fields=(*IMAGE_FIELDS, "index")),
        attrs=("classes", "sizes"),
        more=sources,
    ),
    "images-v1/16-in-memory": Case(
        "images-v1", lambda r: ImageShardDataset(r, size=16, fields=IMAGE_FIELDS, in_memory=True)
    ),
    "images-v1-rewritten/24": Case(
        "images-v1-rewritten",
        lambda r: ImageShardDataset(r, size=24, fields=(*IMAGE_FIELDS, "index")),
        attrs=("classes", "sizes"),
        more=sources,
    ),
    "images-v1-rewritten/16-in-memory": Case(
        "images-v1-rewritten",
        lambda r: ImageShardDataset(r, size=16, fields=IMAGE_FIELDS, in_memory=True),
    ),
    "tokens-v1/windows-train": Case(
        "tokens-v1", lambda r: TokenWindowDataset(r, block_size=8, index=True), attrs=TOKENS
    ),
    "tokens-v1/documents-val": Case(
        "tokens-v1", lambda r: DocumentDataset(r, split="val"), more=sources, batch=0
    ),
    "volumes-v1/whole": Case(
        "volumes-v1",
        VolumeDataset,
        attrs=("fields",),
        more=lambda ds: {"meta": [ds.meta(v) for v in range(len(ds))]},
        batch=0,
    ),
    "volumes-v1/patches": Case(
        "volumes-v1",
        lambda r: PatchDataset(r, patch=(6, 6, 6), per_volume=2, foreground=1.0, seed=2),
        epochs=(0, 1),
    ),
    "table-v1/train": Case(
        "table-v1",
        lambda r: TableDataset(r, missing_mask=True, index=True),
        attrs=TABLE,
        more=TABLE_CALLS,
    ),
    "table-v1/val": Case("table-v1", lambda r: TableDataset(r, split="val", missing_mask=True)),
    # tokens: bytes (no end-of-document id), char and bpe (with one), train and val splits
    "tokens-bytes/windows-train": Case(
        "tokens-bytes",
        lambda r: TokenWindowDataset(r, block_size=16, split="train"),
        attrs=TOKENS,
    ),
    "tokens-bytes/windows-val": Case(
        "tokens-bytes",
        lambda r: TokenWindowDataset(r, block_size=8, split="val", stride=3, index=True),
        attrs=TOKENS,
    ),
    "tokens-bytes/documents-train": Case(
        "tokens-bytes",
        lambda r: DocumentDataset(r, split="train"),
        attrs=TOKENS,
        more=sources,
        batch=0,
    ),
    "tokens-bytes/documents-val": Case(
        "tokens-bytes", lambda r: DocumentDataset(r, split="val", index=True), more=sources, batch=0
    ),
    "tokens-char/windows-train": Case(
        "tokens-char", lambda r: TokenWindowDataset(r, block_size=8, index=True), attrs=TOKENS
    ),
    "tokens-char/windows-val": Case(
        "tokens-char", lambda r: TokenWindowDataset(r, block_size=4, split="val"), attrs=TOKENS
    ),
    "tokens-char/documents-train": Case(
        "tokens-char", lambda r: DocumentDataset(r, split="train"), more=sources, batch=0
    ),
    "tokens-char/documents-val": Case(
        "tokens-char", lambda r: DocumentDataset(r, split="val"), more=sources, batch=0
    ),
    "tokens-bpe/windows-train": Case(
        "tokens-bpe", lambda r: TokenWindowDataset(r, block_size=8, stride=5), attrs=TOKENS
    ),
    "tokens-bpe/documents-val": Case(
        "tokens-bpe", lambda r: DocumentDataset(r, split="val", index=True), more=sources, batch=0
    ),
    # volumes: NIfTI stored LPS and a DICOM series, labels, a numeric and a class target
    "volumes/whole": Case(
        "volumes",
        lambda r: VolumeDataset(r, fields=("image", "label", "target", "index")),
        attrs=("fields",),
        more=lambda ds: {"meta": [ds.meta(v) for v in range(len(ds))]},
        batch=0,
    ),
    "volumes/patches": Case(
        "volumes",
        lambda r: PatchDataset(
            r,
            patch=(6, 6, 6),
            per_volume=3,
            foreground=0.5,
            seed=1,
            fields=("image", "label", "target", "index"),
        ),
        epochs=(0, 1),
    ),
    "volumes-window/whole": Case(
        "volumes-window",
        lambda r: VolumeDataset(r),
        attrs=("fields",),
        more=lambda ds: {"meta": [ds.meta(v) for v in range(len(ds))]},
        batch=0,
    ),
    "volumes-window/patches": Case(
        "volumes-window", lambda r: PatchDataset(r, patch=(4, 8, 8), per_volume=2), epochs=(0, 2)
    ),
    # tables: numbers, codes, a time, missing cells and their masks, a text target, two splits
    "table/train": Case(
        "table",
        lambda r: TableDataset(r, missing_mask=True, index=True),
        attrs=TABLE,
        more=TABLE_CALLS,
    ),
    "table/val-in-memory": Case(
        "table",
        lambda r: TableDataset(r, split="val", missing_mask=True, in_memory=True),
        attrs=TABLE,
    ),
    "table-float16": Case("table-float16", TableDataset, attrs=TABLE, more=TABLE_CALLS),
    "table-float16/in-memory": Case(
        "table-float16", lambda r: TableDataset(r, in_memory=True, index=True)
    ),
    # samples: every field kind of `prep samples`, images kept at their aspect (JPEG and raw)
    # With crop= every ragged Array read beside the boxes is per-box (the boxes a crop drops
    # take their rows along, as with transforms=): this fixture's `labels` is not (1 or 2 rows
    # for 2 boxes), so the crops read the other fields. Their records are those of the crop
    # that drops the boxes it cuts away (issue 34, one rule for crop= and transforms=).
    "samples/32-center": Case(
        "samples",
        lambda r: SampleDataset(
            r,
            fields=("image", "mask", "boxes", "points", "shapes", "caption", "y", "index"),
            size=32,
            crop=CenterCrop(24, ratio=0.875),
        ),
        attrs=("sizes",),
    ),
    "samples/20-list-in-memory": Case(
        "samples",
        lambda r: SampleDataset(
            r,
            fields=("image", "mask", "boxes", "points", "shapes", "tokens", "index"),
            size=20,
            crop=CenterCrop(16, ratio=1.0),
            ragged="list",
            in_memory=True,
        ),
    ),
    "samples/no-images": Case(
        "samples",
        lambda r: SampleDataset(r, fields=("y", "score", "embedding", "caption", "meta", "blob")),
    ),
    "import-coco/24": Case("import-coco", lambda r: SampleDataset(r, size=24, ragged="list")),
    "import-coco/16-crop": Case(
        "import-coco",
        lambda r: SampleDataset(
            r,
            fields=("image", "boxes", "labels", "mask", "instances", "area"),
            size=16,
            crop=CenterCrop(12, ratio=1.0),
        ),
    ),
    "import-pairs": Case(
        "import-pairs",
        lambda r: SampleDataset(r, crop=CenterCrop(12, ratio=0.875)),
        attrs=("sizes",),
    ),
    "import-hf/train": Case("import-hf", lambda r: SampleDataset(r, split="train")),
    "import-hf/validation-in-memory": Case(
        "import-hf", lambda r: SampleDataset(r, split="validation", in_memory=True)
    ),
    "import-wds": Case("import-wds", SampleDataset),
    # audio: mono int16 clips cut at --max-seconds; stereo float16 with targets, in HDF5.
    # AudioDataset(fields=("source",)) is left out: it gives byte k of the flat text array for
    # clip k, not the clip's path (SampleDataset reads the paths right: "audio/samples").
    "audio/windows": Case(
        "audio",
        lambda r: AudioDataset(r, seconds=0.1, fields=("label", "source_rate", "start")),
        attrs=("rate", "channels"),
        more=lambda ds: {"lengths": ds.lengths(list(range(len(ds))))},
        epochs=(0, 1),
    ),
    "audio/whole": Case("audio", lambda r: AudioDataset(r, seconds=None, fields=("index",))),
    "audio/centred": Case("audio", lambda r: AudioDataset(r, seconds=0.05, random=False)),
    "audio/samples": Case("audio", SampleDataset),
    "audio-stereo/windows": Case(
        "audio-stereo",
        lambda r: AudioDataset(r, seconds=0.1, seed=3, fields=("label", "loudness", "kind")),
        attrs=("rate", "channels"),
        epochs=(0, 1),
    ),
    "audio-stereo/samples": Case("audio-stereo", lambda r: SampleDataset(r, ragged="list")),
    # video: raw frames (mode short) and JPEG frames (mode fill, cut at --max-frames)
    "video-raw/clips": Case(
        "video-raw",
        lambda r: ClipDataset(r, frames=3, crop=CenterCrop(16, ratio=1.0), seed=0),
        epochs=(0, 1),
    ),
    "video-raw/clips-per-video": Case(
        "video-raw",
        lambda r: ClipDataset(
            r,
            frames=2,
            stride=2,
            crop=RandomResizedCrop(12, seed=1),
            clips_per_video=2,
            flip=True,
        ),
        epochs=(0, 1),
    ),
    "video-raw/samples": Case("video-raw", lambda r: SampleDataset(r, ragged="list")),
    "video-jpeg/clips": Case("video-jpeg", lambda r: ClipDataset(r, frames=2), epochs=(0, 1)),
    "video-jpeg/samples": Case("video-jpeg", lambda r: SampleDataset(r, ragged="list")),
}


def summary(value: Any) -> Any:
    """`value` as JSON: a tensor as "DTYPE [SHAPE] SHA256" (the sha256 of its bytes), bytes as
    "bytes LENGTH SHA256"; str, numbers, None and JSON objects as they are; containers item by
    item."""
    if isinstance(value, torch.Tensor):
        data = value.contiguous().numpy().tobytes()
        return f"{value.dtype} {list(value.shape)} {_sha(data)}"
    if isinstance(value, bytes):
        return f"bytes {len(value)} {_sha(value)}"
    if isinstance(value, dict):
        return {str(k): summary(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [summary(v) for v in value]
    if hasattr(value, "tolist"):  # a numpy array or scalar
        return value.tolist()
    return value


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def observe(packed: Path, case: Case) -> dict[str, Any]:
    """What `case` reads from its fixture under `packed`, flat: one key a value read."""
    ds = case.open(packed / case.fixture)
    seen: dict[str, Any] = {"len": len(ds)}
    seen |= {f"ds.{name}": summary(getattr(ds, name)) for name in case.attrs}
    seen |= {f"ds.{k}": summary(v) for k, v in (case.more(ds) if case.more else {}).items()}
    for epoch in case.epochs:
        if epoch:
            ds.set_epoch(epoch)
        for i in range(len(ds)):
            seen[f"epoch {epoch} item {i}"] = summary(ds[i])
        if case.batch:
            loader = make_loader(ds, batch_size=case.batch, threads=0)
            for b, batch in enumerate(loader):
                seen[f"epoch {epoch} batch {b}"] = summary(batch)
    return seen


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return json.loads((LEGACY / "expected.json").read_text())


@pytest.mark.parametrize("case_id", CASES)
def test_a_dataset_packed_before_reads_the_same(case_id: str, expected: dict[str, Any]) -> None:
    got, want = observe(PACKED, CASES[case_id]), expected[case_id]
    differ = sorted(k for k in want.keys() | got.keys() if got.get(k) != want.get(k))
    first = differ[0] if differ else ""
    assert not differ, (
        f"{case_id}: {len(differ)} reads differ ({differ[:5]}...); {first!r} gave "
        f"{got.get(first)!r}, expected {want.get(first)!r}"
    )


def test_every_fixture_has_cases_and_every_case_its_record(expected: dict[str, Any]) -> None:
    assert sorted(expected) == sorted(CASES)
    assert {c.fixture for c in CASES.values()} == {p.name for p in PACKED.iterdir()}


@pytest.mark.parametrize("fixture", sorted({c.fixture for c in CASES.values()}))
def test_prep_verify_passes(fixture: str) -> None:
    result = CliRunner().invoke(app, ["verify", str(PACKED / fixture)])
    assert result.exit_code == 0, result.output
