"""VolumeDataset and PatchDataset: patches are slices of the stored volume, read in place,
the same for any number of workers, centred on labels at the requested fraction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_volume_pack import pack_volumes

from loaders import PatchDataset, VolumeDataset, make_loader
from loaders.read.store import ShardStore
from prep.demo.volumes import make_phantoms


@pytest.fixture(scope="module")
def packed_ct(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tmp_path_factory.mktemp("ct")
    make_phantoms(raw, count=3, seed=1, side=32, dicom=False)
    out = raw / "packed"
    pack_volumes(raw / "images", out, labels=str(raw / "labels"), window="-1000,400")
    return out


def expected_patch(ds: PatchDataset, i: int, field: str) -> np.ndarray:
    """The patch cut from the whole volume (and padded) with numpy, as a reference."""
    vol = ds.volume(i // ds.per_volume, field)
    pad = ds.meta(i // ds.per_volume)["pad"] if field == "image" else 0
    big = np.pad(np.asarray(vol), [(p, p) for p in ds.patch], constant_values=pad)
    s = ds.start(i) + ds.patch
    return big[tuple(slice(a, a + p) for a, p in zip(s, ds.patch, strict=True))]


def test_volumes_are_stored_arrays(packed_ct: Path) -> None:
    ds = VolumeDataset(packed_ct)
    assert len(ds) == 3
    image, label = ds[1]
    assert image.shape == (1, *ds.shape(1)) == label.shape and image.dtype == torch.uint8
    assert torch.equal(image[0], torch.from_numpy(np.array(ds.volume(1))))
    with pytest.raises(ValueError, match="no field"):
        VolumeDataset(packed_ct, fields=("mask",))


@pytest.mark.parametrize("patch", [(8, 12, 6), (40, 40, 40)])
def test_patch_equals_slice_and_pads(packed_ct: Path, patch: tuple[int, int, int]) -> None:
    """Inside the volume a patch is its slice; a patch larger than the volume holds all of it,
    centred, padded with the packing's pad value (images) and 0 (labels)."""
    ds = PatchDataset(packed_ct, patch=patch, per_volume=5, foreground=0.5, seed=3)
    image, label = ds.__getitems__(list(range(len(ds)))).tensors
    assert image.shape == (15, 1, *patch)
    for i in range(len(ds)):
        assert np.array_equal(image[i, 0].numpy(), expected_patch(ds, i, "image"))
        assert np.array_equal(label[i, 0].numpy(), expected_patch(ds, i, "label"))


class Recording(np.ndarray):
    """A voxel array that records which elements indexing reads."""

    reads: list[int]

    def __getitem__(self, key: Any) -> Any:
        part = super().__getitem__(key)
        if isinstance(part, np.ndarray) and part.ndim == 3:
            Recording.reads.append(part.size)
        return part


def test_reads_only_the_patch(packed_ct: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The voxels a patch reads are its own: one 3-D slice of the patch's size, a view of the
    map (no copy of the volume), never the whole volume."""
    Recording.reads = []
    real = ShardStore.array

    def array(self: ShardStore, shard: int, name: str) -> np.ndarray:
        arr = real(self, shard, name)
        return arr.view(Recording) if name in ("image", "label") else arr

    monkeypatch.setattr(ShardStore, "array", array)
    ds = PatchDataset(packed_ct, patch=(8, 8, 4), per_volume=4, fields=("image",))
    ds.__getitems__(list(range(len(ds))))
    assert Recording.reads == [8 * 8 * 4] * len(ds)
    vol = ds.volume(0)
    assert np.shares_memory(vol, real(ds.store, 0, "image"))  # a view of the map


def test_same_patches_any_workers_and_epochs(packed_ct: Path) -> None:
    ds = PatchDataset(packed_ct, patch=(16, 16, 8), per_volume=4, seed=7)
    batches = {}
    for workers in (0, 2):
        loader = make_loader(ds, batch_size=4, shuffle=True, num_workers=workers, seed=1)
        batches[workers] = [torch.cat([x.flatten(1), y.flatten(1)], 1) for x, y in loader]
    assert all(torch.equal(a, b) for a, b in zip(batches[0], batches[2], strict=True))
    first = torch.stack([ds[i][0] for i in range(len(ds))])
    ds.set_epoch(1)
    assert not torch.equal(first, torch.stack([ds[i][0] for i in range(len(ds))]))
    ds.set_epoch(0)
    assert torch.equal(first, torch.stack([ds[i][0] for i in range(len(ds))]))


@pytest.mark.parametrize("fraction", [0.0, 0.33, 1.0])
def test_foreground_fraction(packed_ct: Path, fraction: float) -> None:
    """A 1-voxel patch is its centre: labelled with probability fraction + (1 - fraction) * p,
    p the labelled share of the volumes (uniform centres hit labels that often)."""
    ds = PatchDataset(packed_ct, patch=(1, 1, 1), per_volume=400, foreground=fraction, seed=0)
    _, label = ds.__getitems__(list(range(len(ds)))).tensors
    hit = (label.reshape(3, -1) > 0).float().mean(1).numpy()
    share = np.asarray([(np.asarray(ds.volume(v, "label")) > 0).mean() for v in range(3)])
    expected = fraction + (1 - fraction) * share
    sigma = np.sqrt(expected * (1 - expected) / 400)
    assert np.all(np.abs(hit - expected) <= 4 * sigma + 1e-9)


def test_bad_arguments(packed_ct: Path) -> None:
    for kwargs in ({"patch": (8, 8)}, {"patch": (8, 8, 0)}, {"patch": (8, 8, 8), "foreground": 2}):
        with pytest.raises(ValueError):
            PatchDataset(packed_ct, **kwargs)
